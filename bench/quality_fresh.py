"""Two more held-out sets for the families-against-baselines check, written blind to the models.

Nobody tuned a Headrace model on these: their knobs (``SUPPORT`` and ``HOUSING``) were set only
from the scikit-learn baselines as bench/quality_baselines.py fits them (80/20 split,
``random_state=0``; logistic regression with C by 3-fold CV on a bag of words and on uni+bigrams;
ridge with alpha by CV on standardised columns) on development seeds 4100-4102, then frozen.
Their own seeds are 4000 and up (``SEED``), never looked at while setting the knobs.

- ``support``: customer messages to a retail bank, routed to 6 queues (cards, transfers,
  lending, fraud, digital, account). The queues share most of their words (card, payment,
  account, app, code...), each request is said several ways, and messages carry greetings,
  account chatter, reference numbers, amounts, dates, side remarks about another queue, now and
  then a second full request for another queue after the main one (routed by the first), typos
  and 3 % flipped labels. Same JSONL layout as ``helpdesk`` (``ticket``, ``label``).
- ``housing``: house sale prices from 11 listing columns on scales from 0.01 to 100 000
  (floor area, rooms, lot, distance, school rating, income, crime, age, garage, tax rate) that
  are correlated through a hidden neighbourhood quality and the distance to the centre, 3 of
  them pure noise. The price is mostly linear, with a saturating distance premium and an
  area x school interaction (without noise, ridge's R^2 is about 0.93), plus heavy-tailed
  (Student t) noise. Same CSV layout as ``friedman``: one float column per feature (named here,
  not ``x0``..) and the target in ``label``.

``python bench/quality_fresh.py support|housing [seed]`` prints a few rows and the baselines.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import quality_baselines
import quality_tickets

SEED = 4000

# --- support: bank customer messages ---------------------------------------------------------

# Slots: {x} is filled from SLOTS[x]; most slot words are used by several queues.
SLOTS = {
    "card": ["card", "debit card", "credit card", "visa card", "bank card", "mastercard"],
    "payment": ["payment", "transaction", "charge", "transfer", "purchase"],
    "account": ["account", "current account", "savings account", "joint account"],
    "app": ["app", "online banking", "mobile app", "website", "banking app"],
    "code": ["code", "pin", "password", "security code", "passcode"],
    "money": ["money", "funds", "the money", "my money"],
    "when": ["yesterday", "this morning", "last week", "on monday", "two days ago",
             "on the 3rd", "last night", "since friday", "earlier today"],
    "want": ["i want to", "i would like to", "i need to", "can i", "could you help me",
             "how do i", "please help me"],
    "loan": ["loan", "personal loan", "mortgage", "car loan", "overdraft"],
    "someone": ["my landlord", "my sister", "a supplier", "a friend", "the seller",
                "my electricity company", "my son"],
    "shop": ["amazon", "a petrol station", "the supermarket", "a hotel", "an online shop",
             "netflix", "a restaurant"],
}

# The main request of each queue: several shapes, built from the shared slots.
QUEUES = {
    "cards": [
        "my new {card} still has not arrived", "my {card} was declined at {shop} {when}",
        "{want} order a replacement {card}, mine is damaged",
        "the chip on my {card} stopped working", "{want} change the {code} on my {card}",
        "i forgot the {code} for my {card}", "my {card} expires next month, will a new one "
        "be sent", "contactless does not work on my {card}",
        "the cash machine kept my {card} {when}", "{want} raise the spending limit on my {card}",
        "my {card} is blocked and i do not know why", "{want} activate my new {card}"],
    "transfers": [
        "i sent {money} to {someone} {when} and it has not arrived",
        "a {payment} to {someone} is still pending", "i made a {payment} to the wrong account",
        "{want} set up a standing order to {someone}",
        "{want} cancel a standing order", "how long does an international {payment} take",
        "{someone} says they never received my {payment}",
        "{want} send {money} abroad, what are the fees",
        "the iban was rejected when i tried to pay {someone}",
        "my salary has not come into my {account}", "{want} stop a direct debit",
        "the {payment} limit stops me paying {someone}"],
    "lending": [
        "{want} apply for a {loan}", "what interest rate would i get on a {loan}",
        "{want} increase my overdraft", "can i pay off my {loan} early",
        "i will miss my {loan} repayment this month", "{want} borrow some {money} for a car",
        "why was my {loan} application declined", "how much could i borrow for a mortgage",
        "{want} change the date of my {loan} repayment",
        "i was charged interest on my overdraft", "{want} remortgage with you",
        "{want} extend the term of my {loan}"],
    "fraud": [
        "there is a {payment} on my {card} that i did not make",
        "i do not recognise a {payment} to {shop}", "someone used my {card} {when}",
        "i got a text asking for my {code}, is it a scam",
        "i think someone logged into my {app}", "i was tricked into sending {money} to a scammer",
        "my {card} was stolen and used at {shop}", "several {payment}s i never made",
        "i gave my {code} to someone on the phone who said they were the bank",
        "money has disappeared from my {account}", "i received an email pretending to be you",
        "a strange {payment} to {shop} keeps coming back every month"],
    "digital": [
        "i cannot log in to the {app}", "the {app} crashes when i open it",
        "i am not getting the verification {code} by text", "{want} reset my {code} for the {app}",
        "the {app} says my device is not registered", "face id stopped working on the {app}",
        "i am locked out of {app} after too many attempts",
        "{want} use the {app} on my new phone", "the {app} shows an error when i try to pay",
        "my balance is not updating in the {app}",
        "the {app} keeps logging me out", "the {app} will not accept my {code}"],
    "account": [
        "{want} open a {account}", "{want} close my {account}",
        "{want} change my address", "{want} download my statements for last year",
        "{want} add my partner to my {account}", "{want} change the name on my {account}",
        "i need a letter confirming my {account} details",
        "what is the interest on the {account}", "{want} switch my {account} to you",
        "why was i charged a monthly fee on my {account}",
        "{want} update my phone number", "{want} upgrade to a premium {account}"],
}

# Chatter around the request: greetings, context, sign-offs; {n} is a digit.
CHATTER = [
    "hi", "hello", "good morning", "dear sir or madam", "hey there", "hi team",
    "i have banked with you for {n} years", "my account ends in {n}{n}{n}{n}",
    "this is the second time i am writing", "i tried calling but waited an hour",
    "i am travelling at the moment", "it is quite urgent", "sorry to bother you",
    "i use the {app} most days", "i usually pay with my {card}",
    "i checked the {app} {when}", "ref {n}{n}{n}{n}{n}{n}", "customer number {n}{n}{n}{n}{n}",
    "the amount was {n}{n}.{n}{n}", "it was about {n}{n}0 pounds", "{when}",
    "thanks in advance", "thank you", "many thanks", "regards", "kind regards, alex",
    "cheers", "sent from my iphone", "please get back to me soon", "hope you are well",
    "my partner also has an account with you", "i spoke to someone in the branch",
    "i have tried everything", "nothing has changed since then",
]

# A second, smaller request for another queue, said on the side: the message is not about it.
SIDE = {
    "cards": ["also my {card} expires soon", "also, is my new {card} on its way",
              "by the way my {card} {code} does not work either"],
    "transfers": ["i also have a {payment} to {someone} pending",
                  "also how do i set up a standing order"],
    "lending": ["i might also want a {loan} later", "also what rate is the overdraft"],
    "fraud": ["i also had a weird text {when}", "there was also a {payment} i did not "
              "recognise but it turned out fine"],
    "digital": ["also the {app} is very slow", "the {app} also logged me out {when}"],
    "account": ["also i moved house recently", "also can i get my statements"],
}
ALSO = ["also ", "and ", "one more thing, ", "while i am here, ", "and also ", "oh and "]


@dataclass(frozen=True)
class Support:
    """The text generator's knobs (set from the baselines on seeds 4100-4102, see module)."""

    side: float = 0.35  # chance of a side remark about another queue
    second: float = 0.2  # chance of a second, full request for another queue after the main one
    max_chatter: int = 4  # chatter sentences: 0..max_chatter
    typo: float = 0.08  # chance per word of one edit (swap, drop, double, replace)
    flip: float = 0.03  # label noise


SUPPORT = Support()


def _fill(template: str, rng: np.random.Generator) -> str:
    return quality_tickets.fill(template, SLOTS, rng)


def _message(queue: str, rng: np.random.Generator, d: Support) -> str:
    sentences = [_fill(str(rng.choice(QUEUES[queue])), rng)]
    if rng.random() < d.side:
        other = str(rng.choice([q for q in sorted(SIDE) if q != queue]))
        sentences.append(_fill(str(rng.choice(SIDE[other])), rng))
    if rng.random() < d.second:  # two problems in one message: routed by the first
        other = str(rng.choice([q for q in sorted(QUEUES) if q != queue]))
        sentences.insert(1, str(rng.choice(ALSO)) + _fill(str(rng.choice(QUEUES[other])), rng))
    for _ in range(int(rng.integers(d.max_chatter + 1))):
        sentences.insert(int(rng.integers(len(sentences) + 1)),
                         _fill(str(rng.choice(CHATTER)), rng))
    return quality_tickets.written(sentences, rng, d.typo)


def support(path: Path, rows: int = 1500, seed: int = SEED, d: Support = SUPPORT) -> Path:
    rng = np.random.default_rng(seed)
    queues = sorted(QUEUES)
    lines = []
    for _ in range(rows):
        queue = str(rng.choice(queues))
        text = _message(queue, rng, d)
        label = queue if rng.random() >= d.flip else str(rng.choice(queues))
        lines.append(json.dumps({"ticket": text, "label": label}))
    path.write_text("\n".join(lines) + "\n")
    return path


# --- housing: sale prices ---------------------------------------------------------------------


@dataclass(frozen=True)
class Housing:
    """The regression generator's knobs (set from the baselines on seeds 4100-4102)."""

    noise: float = 145_000.0  # scale of the price noise (Student t, 5 degrees of freedom)
    distance_premium: float = 150_000.0  # the saturating premium near the centre
    interaction: float = 40.0  # price per square foot per school-rating point above 6


HOUSING = Housing()


def housing(path: Path, rows: int = 1200, seed: int = SEED, d: Housing = HOUSING) -> Path:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    rng = np.random.default_rng(seed)
    n = rows
    quality = rng.normal(0.0, 1.0, n)  # the neighbourhood, never a column
    distance = np.exp(rng.normal(np.log(9.0), 0.7, n))  # km to the centre
    sqft = np.exp(rng.normal(np.log(1600.0), 0.35, n) + 0.08 * np.log(distance))
    bedrooms = np.clip(np.round(sqft / 550 + rng.normal(0, 0.7, n)), 1, 7)
    bathrooms = np.clip(np.round(2 * (0.5 + 0.45 * bedrooms + rng.normal(0, 0.4, n))) / 2,
                        1, 5)
    lot = np.exp(rng.normal(np.log(0.15), 0.5, n) + 0.5 * np.log(distance / 9.0))  # acres
    school = np.clip(6.0 + 1.4 * quality + rng.normal(0, 1.0, n), 1, 10)
    income = 62_000 * np.exp(0.25 * quality + rng.normal(0, 0.15, n))
    crime = np.exp(rng.normal(np.log(18.0), 0.35, n) - 0.35 * quality
                   - 0.3 * np.log(distance / 9.0))  # per 1000 residents
    age = np.clip(55 - 1.5 * distance + rng.normal(0, 18, n), 0, 120)
    garage = np.clip(np.round(0.4 + 0.06 * distance + rng.normal(0, 0.7, n)), 0, 3)
    tax = np.clip(0.012 + 0.002 * quality + rng.normal(0, 0.002, n), 0.005, 0.03)
    price = (60_000 + 120 * sqft + 6_000 * bedrooms + 12_000 * bathrooms + 40_000 * lot
             + 14_000 * school + 1.2 * income - 1_500 * crime - 700 * age + 9_000 * garage
             - 2_000_000 * tax
             + d.distance_premium * np.exp(-distance / 4.0)  # saturates away from the centre
             + d.interaction * sqft * (school - 6.0)  # good schools make space worth more
             + d.noise * rng.standard_t(5, n) / np.sqrt(5 / 3))
    cols = {
        "sqft": np.round(sqft), "bedrooms": bedrooms, "bathrooms": bathrooms,
        "lot_acres": np.round(lot, 3), "distance_km": np.round(distance, 2),
        "school_rating": np.round(school, 1), "median_income": np.round(income, -2),
        "crime_per_1000": np.round(crime, 1), "age_years": np.round(age),
        "garage_spaces": garage, "tax_rate": np.round(tax, 4),
        # pure noise: nothing to do with the price
        "days_on_market": np.round(rng.exponential(35.0, n)),
        "listing_month": rng.integers(1, 13, n).astype(np.float64),
        "photo_count": rng.poisson(22, n).astype(np.float64),
    }
    table = {k: pa.array(v.astype(np.float64)) for k, v in cols.items()}
    table["label"] = pa.array(np.round(price, -2))
    pcsv.write_csv(pa.table(table), path)
    return path


def baselines(name: str, seed: int, folder: Path) -> dict[str, Any]:
    """Write set ``name`` at ``seed`` under ``folder`` and score its baselines."""
    t0 = time.perf_counter()
    if name == "support":
        path = support(folder / f"support-{seed}.jsonl", seed=seed)
    elif name == "housing":
        path = housing(folder / f"housing-{seed}.csv", seed=seed)
    else:
        raise ValueError(f"unknown set {name!r}: support or housing")
    generated = time.perf_counter() - t0
    train, test = quality_baselines.split(quality_baselines.read_rows(path),
                                          classifier=name == "support")
    base = (quality_baselines.text_baselines("ticket", train, test) if name == "support"
            else quality_baselines.ridge_baseline(train, test))
    return {"dataset": name, "seed": seed, "train_rows": len(train), "test_rows": len(test),
            **base, "generate_seconds": round(generated, 2),
            "total_seconds": round(time.perf_counter() - t0, 1)}


if __name__ == "__main__":  # print a few rows and the baselines: support|housing [seed]
    import sys
    import tempfile

    which = sys.argv[1] if len(sys.argv) > 1 else "support"
    at = int(sys.argv[2]) if len(sys.argv) > 2 else SEED
    with tempfile.TemporaryDirectory() as tmp:
        result = baselines(which, at, Path(tmp))
        for row in quality_baselines.read_rows(next(Path(tmp).iterdir()))[:6]:
            print(row)
    print(json.dumps(result))
