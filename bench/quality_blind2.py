"""A held-out text set for the families-against-baselines check, written blind to the models.

- ``hr``: messages from employees to an HR service desk, routed to 7 teams: ``payroll`` (pay,
  payslips, tax codes, overtime, expenses paid through pay), ``leave`` (holiday, sick leave,
  parental leave, time off), ``benefits`` (pension, health cover, gym, cycle scheme, life
  insurance), ``recruiting`` (vacancies, referrals, interviews, internal moves, offers),
  ``relocation`` (moving for work, visas, temporary housing, removal costs), ``access``
  (onboarding and leavers: badges, laptops, system accounts, starter paperwork) and ``conduct``
  (complaints, harassment, grievances, whistleblowing). The teams share most of their words
  (pay, manager, start date, contract, form, portal, team, month...), each request is said many
  ways through templates with slots, a quarter of the requests are only named by a short topic
  ("question about the lease break fee"; about 32 topics a team, so many are seen rarely in
  1,200 training rows), and messages carry greetings, work chatter, employee numbers, dates and
  amounts, side remarks that mention another team in passing, now and then a second request for
  another team after the main one (routed by the first), typos and 3 % flipped labels. 8 to
  about 70 words. JSON lines: ``text``, ``label``.

Nobody tuned a Headrace model on this set: its knobs (``HR``) were set only from the
scikit-learn baselines as bench/quality_baselines.py fits them (80/20 split, ``random_state=0``;
logistic regression with C by 3-fold CV on a bag of words and on uni+bigrams) on development
seeds 4300-4302, then frozen: uni+bigram LR scores 0.80 / 0.77 / 0.72 there (mean 0.76) on
the default 1,500 rows, and 0.86 / 0.87 when trained on 7,500 rows (300 held out, seeds 4300
and 4301), so more data still helps: the set is not saturated. Its own seeds are 6000-6002
(``SEED`` and up), never generated or looked at while setting the knobs.

``python bench/quality_blind2.py [seed]`` prints a few rows and the baselines.
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

SEED = 6000

# Slots: {x} is filled from SLOTS[x] ({n} is a digit); most slot words are used by several teams.
SLOTS = {
    "want": ["i want to", "i would like to", "i need to", "can i", "could you help me",
             "how do i", "please can i", "is it possible to", "i was hoping to",
             "what do i do to", "who do i speak to to"],
    "manager": ["my manager", "my line manager", "my team lead", "my boss", "my supervisor",
                "the head of my department", "my director"],
    "colleague": ["a colleague", "someone on my team", "a coworker", "another team member",
                  "a person in my office", "a contractor we work with", "a senior colleague"],
    "when": ["last month", "this month", "in march", "last friday", "since january",
             "two weeks ago", "on the 15th", "yesterday", "at the end of the quarter",
             "next month", "from june", "earlier this week"],
    "portal": ["the hr portal", "workday", "the self service portal", "the intranet",
               "the employee app", "the people system", "myhr"],
    "form": ["form", "request", "application", "paperwork", "document", "ticket"],
    "pay": ["pay", "salary", "wages", "paycheck", "payslip", "pay packet"],
    "payitem": ["overtime", "my bonus", "shift allowance", "on call pay", "commission",
                "holiday pay", "my pay rise", "back pay", "the weekend uplift",
                "travel expenses", "mileage", "the night premium", "my sign on bonus"],
    "tax": ["tax code", "p60", "p45", "national insurance number", "w2", "tax deduction",
            "student loan deduction", "withholding"],
    "leavetype": ["annual leave", "holiday", "vacation", "time off", "sick leave",
                  "parental leave", "maternity leave", "paternity leave", "compassionate leave",
                  "unpaid leave", "a sabbatical", "study leave", "a day off", "carers leave",
                  "jury service leave", "bereavement leave"],
    "days": ["two days", "a week", "three weeks", "a few days", "10 days", "a month",
             "half a day", "the whole of august", "friday afternoon", "six months"],
    "benefit": ["pension", "health insurance", "dental cover", "the gym membership",
                "the cycle to work scheme", "life insurance", "the share scheme",
                "private medical cover", "the eye test voucher", "childcare vouchers",
                "the employee assistance programme", "the wellbeing allowance",
                "the electric car scheme", "income protection", "the season ticket loan",
                "critical illness cover"],
    "dependant": ["my partner", "my wife", "my husband", "my kids", "my daughter", "my son",
                  "my newborn", "my spouse"],
    "role": ["the data analyst role", "a developer position", "the team lead vacancy",
             "the marketing job", "an internship", "the warehouse supervisor role",
             "a graduate position", "the senior engineer opening", "the nurse post",
             "the sales manager job", "the finance assistant vacancy", "a part time role",
             "the product owner role", "the designer opening"],
    "candidate": ["a candidate", "the applicant", "my friend", "a former colleague",
                  "someone i know", "an agency candidate", "the person we interviewed"],
    "city": ["london", "berlin", "the manchester office", "new york", "singapore", "dublin",
             "the leeds site", "madrid", "toronto", "our paris office", "amsterdam",
             "the glasgow hub"],
    "move": ["relocate", "move", "transfer", "relocation", "move house", "moving"],
    "housing": ["temporary accommodation", "a serviced apartment", "a hotel", "corporate housing",
                "short term rental", "a flat near the office"],
    "kit": ["laptop", "badge", "access card", "email account", "vpn", "login", "monitor",
            "phone", "security pass", "building pass", "sap access", "crm account",
            "shared drive access", "headset", "desk", "slack account", "payroll system access"],
    "newbie": ["a new starter", "my new hire", "the new joiner", "our new intern",
               "a new team member", "the contractor starting", "the graduate joining"],
    "issue": ["comments", "behaviour", "remarks", "jokes", "messages", "treatment", "shouting",
              "emails", "conduct"],
}

# The main request of each team: several shapes, built from the shared slots.
TEAMS = {
    "payroll": [
        "my {pay} was short {when}", "i have not been paid {payitem} for {when}",
        "{payitem} is missing from my {pay}", "there is a mistake on my {pay} for {when}",
        "my {tax} looks wrong and too much tax was taken", "{want} get a copy of my {tax}",
        "{want} change the bank account my {pay} goes into",
        "i was overpaid {when}, how do i pay it back", "why is my {pay} lower than usual",
        "my {pay} has not arrived and it is payday", "{want} understand the deductions on my {pay}",
        "my {pay} rise from the review is not showing", "{payitem} was paid at the wrong rate",
        "i got an emergency tax code after starting", "{want} claim {payitem} for {when}",
        "i was underpaid for the hours i worked {when}", "{manager} approved {payitem} but it "
        "was not in my {pay}", "can you explain the gross to net on my {pay}",
        "{want} get a salary advance", "my final {pay} after leaving was wrong"],
    "leave": [
        "{want} book {leavetype} for {days}", "{want} take {leavetype} {when}",
        "how much {leavetype} do i have left", "my {leavetype} balance in {portal} is wrong",
        "{want} carry over unused {leavetype} into next year", "i was sick for {days} {when}, "
        "how do i record it", "{manager} has not approved my {leavetype}",
        "{want} cancel the {leavetype} i booked", "i am pregnant and want to plan {leavetype}",
        "{want} buy extra holiday", "{want} sell back {days} of holiday",
        "what is the policy on {leavetype}", "i need {days} off to look after {dependant}",
        "{want} extend my {leavetype} by {days}", "my doctor signed me off for {days}",
        "{want} work part time when i come back from {leavetype}",
        "who covers my work while i am on {leavetype}", "{want} request {leavetype} at short "
        "notice", "my {leavetype} request was rejected without a reason",
        "how does {leavetype} affect my {pay}"],
    "benefits": [
        "{want} join {benefit}", "{want} add {dependant} to {benefit}",
        "{want} increase my {benefit} contributions", "how do i claim on {benefit}",
        "{want} opt out of {benefit}", "my {benefit} has not started yet",
        "{benefit} is still being deducted even though i left it",
        "what does {benefit} cover", "{want} sign up for {benefit} during enrolment",
        "{want} change my {benefit} provider", "is {dependant} covered by {benefit}",
        "{benefit} rejected my claim", "{want} see my {benefit} statement",
        "when is the enrolment window for {benefit}", "{want} transfer an old {benefit} in",
        "{want} use salary sacrifice for {benefit}", "the {benefit} card never arrived",
        "how much does {benefit} cost a month", "who is the contact for {benefit}",
        "{want} nominate a beneficiary for {benefit}"],
    "recruiting": [
        "{want} apply for {role}", "{want} refer {candidate} for {role}",
        "has the referral bonus for {candidate} been approved", "{want} move internally to "
        "{role}", "when will i hear back about {role}", "{want} open a vacancy for {role}",
        "{candidate} has not received an offer letter", "can we schedule interviews for {role}",
        "{want} post {role} on the careers site", "{candidate} wants to negotiate the offer",
        "i interviewed for {role} {when} and heard nothing", "{want} be on the interview panel "
        "for {role}", "the job description for {role} needs updating",
        "{want} withdraw my application for {role}", "{candidate} accepted, what happens next",
        "{want} hire a temp for {days}", "can we use an agency for {role}",
        "{want} get feedback from my interview for {role}",
        "{manager} wants to backfill {role}", "is {role} open to internal applicants"],
    "relocation": [
        "{want} {move} to {city}", "i am being transferred to {city}, what support is there",
        "{want} claim removal costs for my {move}", "{want} book {housing} in {city}",
        "{want} extend my stay in {housing}", "what is the relocation allowance for {city}",
        "{want} bring {dependant} with me to {city}", "my visa for {city} is about to expire",
        "{want} start the work permit for {city}", "{want} find schools in {city} for "
        "{dependant}", "who pays the agent fees for my {move}", "my {housing} in {city} "
        "ends {when}", "is the relocation package taxable", "{want} ship my furniture to "
        "{city}", "{want} get help with a visa for {dependant}",
        "{manager} agreed i can {move} to {city}", "{want} claim the cost of flights to {city}",
        "i have to repay the relocation bonus if i leave?", "the movers for {city} have not "
        "been booked", "{want} work from {city} for {days}"],
    "access": [
        "{newbie} starts {when} and needs a {kit}", "my {kit} stopped working",
        "{want} get a new {kit}", "i still do not have a {kit} after starting",
        "{newbie} has no {kit} yet", "{want} request {kit} for {newbie}",
        "i am locked out of {portal}", "{want} reset my {kit}",
        "my {kit} was not set up on my first day", "{colleague} left and still has a {kit}",
        "{want} return my {kit} as i am leaving", "{want} get access to {portal}",
        "the onboarding checklist for {newbie} is incomplete",
        "{newbie} did not get the welcome pack", "{want} order a {kit} for {newbie}",
        "my {kit} does not open the door on the third floor", "{want} remove access for "
        "{colleague} who left", "{newbie} cannot log in to {portal}",
        "my {kit} expired {when}", "{want} get my {kit} and {kit} before my start date"],
    "conduct": [
        "{colleague} keeps making {issue} about me", "{want} report {colleague} for their "
        "{issue}", "{want} raise a grievance about {manager}", "{manager} shouted at me in front "
        "of the team", "i feel bullied by {colleague}", "{want} make a formal complaint",
        "{colleague} made inappropriate {issue} at the party", "i think {manager} is treating "
        "me unfairly", "{want} report something anonymously", "{colleague} sent me offensive "
        "{issue}", "i witnessed harassment {when}", "{want} blow the whistle on fraud in my "
        "team", "i do not feel safe around {colleague}", "{manager} is discriminating against "
        "me", "{want} appeal the outcome of my disciplinary", "{colleague} keeps touching my "
        "shoulder and it makes me uncomfortable", "{want} talk to someone about how {manager} "
        "speaks to me", "{colleague} has been excluding me from meetings on purpose",
        "there is a conflict of interest in my team", "{want} report {issue} from a client"],
}

# Short topics people name instead of spelling the request out ("question about ..."): many
# per team, a few words each, so a team is often recognised only from a phrase seen rarely.
TOPICS = {
    "payroll": [
        "my payslip", "the overtime rate", "my tax code", "the p60", "salary sacrifice "
        "deductions", "my net pay", "the bonus payout", "payroll cut off dates",
        "the pay date this month", "my hourly rate", "the shift premium", "backdated pay",
        "an overpayment", "my student loan deduction", "the payroll calendar",
        "my commission statement", "the pay rise letter", "gross pay", "tax refund",
        "emergency tax", "pay in lieu of notice", "the 13th month payment",
        "my bank details for pay", "expenses in my pay", "the salary review outcome",
        "the mileage rate", "unpaid hours", "the payslip breakdown", "national insurance",
        "the pay grade bands", "payment of my final salary", "the on call rate"],
    "leave": [
        "my holiday allowance", "booking vacation", "the sickness policy", "a fit note",
        "return to work interviews", "maternity pay", "paternity leave rules",
        "shared parental leave", "carry over days", "bank holidays", "a career break",
        "time off for a funeral", "the absence calendar", "medical appointments in work time",
        "a phased return", "the leave year", "religious holidays", "time off in lieu",
        "adoption leave", "keeping in touch days", "my remaining days", "unpaid time off",
        "a self certification", "long term sickness", "the holiday booking rules",
        "dependant leave", "half days", "fertility treatment leave", "moving day leave",
        "the christmas shutdown", "sick days", "leave approval"],
    "benefits": [
        "the pension scheme", "employer pension contributions", "health cover", "dental",
        "the gym discount", "cycle to work", "the life assurance", "the share save scheme",
        "the benefits window", "flexible benefits", "the opticians voucher", "the wellbeing "
        "budget", "private healthcare for family", "the company car", "the ev lease",
        "critical illness", "the discount platform", "tech scheme", "childcare support",
        "the annual benefits statement", "pension auto enrolment", "the cash plan",
        "the employee assistance line", "travel insurance", "mortgage advice perk",
        "the buy a bike scheme", "health screening", "the physio allowance",
        "benefit provider change", "the retirement plan", "income protection cover",
        "the salary sacrifice car"],
    "recruiting": [
        "the referral scheme", "an open vacancy", "internal job postings", "interview "
        "scheduling", "the graduate programme", "an offer letter", "the hiring freeze",
        "the recruitment agency", "a job advert", "shortlisting candidates", "the careers page",
        "background checks for a candidate", "the interview panel", "headcount approval",
        "a secondment opportunity", "the apprenticeship intake", "an internal transfer",
        "candidate feedback", "the assessment centre", "the salary range for a vacancy",
        "job descriptions", "a promotion application", "the talent pool", "hiring a "
        "temp", "the job fair", "a rejected application", "the applicant tracking system",
        "the interview questions", "the reference request", "a counter offer",
        "the summer internship", "the hiring plan"],
    "relocation": [
        "the relocation package", "a work visa", "the removal company", "temporary housing",
        "the moving allowance", "school search support", "a residence permit",
        "the international transfer", "shipping my belongings", "house hunting trips",
        "the tax on relocation", "the cost of living adjustment", "the visa sponsorship",
        "a spouse visa", "the settling in service", "the lease break fee", "storage while "
        "moving", "the destination services", "the repayment clause on relocation",
        "my move abroad", "a cross border transfer", "the relocation agent",
        "language classes abroad", "flights for the move", "the immigration lawyer",
        "an overseas assignment", "the home leave flights", "the hardship allowance",
        "the expat package", "pet transport", "the local registration", "the move date"],
    "access": [
        "my laptop setup", "a new badge", "the door access", "my login details",
        "vpn access", "the starter checklist", "first day setup", "system access for a "
        "starter", "the leaver process", "returning equipment", "the induction day",
        "a replacement pass", "the building access", "my email not working",
        "the new starter paperwork", "software licences", "the shared drive",
        "my access card", "the onboarding portal", "account deactivation", "a new "
        "monitor", "the welcome pack", "the locker key", "my phone setup",
        "the right to work check", "my id photo", "the parking permit", "the desk booking",
        "the induction training", "permissions in the system", "the mfa token",
        "the joiner form"],
    "conduct": [
        "a complaint about a colleague", "bullying", "harassment", "a grievance",
        "the whistleblowing line", "discrimination", "an incident at work",
        "a disciplinary hearing", "inappropriate behaviour", "the dignity at work policy",
        "a hostile atmosphere", "an investigation", "unfair treatment", "a formal complaint",
        "misconduct", "the appeal process", "a safeguarding concern", "sexual harassment",
        "victimisation", "a toxic manager", "racist comments", "the code of conduct",
        "a conflict with my manager", "mediation", "retaliation", "an anonymous report",
        "offensive messages", "intimidation", "a fraud concern", "the grievance outcome",
        "a threat from a colleague", "a bias complaint"],
}

# Generic shapes for a request named only by its topic.
VAGUE = [
    "i have a question about {topic}", "who do i ask about {topic}",
    "can someone help me with {topic}", "what is the process for {topic}",
    "i need some information on {topic}", "where can i find info about {topic}",
    "quick query regarding {topic}", "could someone call me about {topic}",
    "i am confused about {topic}", "is there a guide for {topic}",
    "please advise on {topic}", "i need to discuss {topic}",
    "{manager} said to email you about {topic}", "can i get an update on {topic}",
    "there is an issue with {topic}", "following up on {topic}",
]

# Chatter around the request: greetings, context, sign-offs.
CHATTER = [
    "hi", "hello", "hi hr", "good morning", "hey team", "dear hr", "hi there", "morning all",
    "i joined {n} years ago", "my employee number is {n}{n}{n}{n}{n}", "staff id {n}{n}{n}{n}",
    "i work in the {city} office", "i am on the night shift", "i work part time",
    "{manager} told me to contact you", "i checked {portal} but could not find it",
    "i tried {portal} first", "it is quite urgent", "sorry if this is the wrong place",
    "this is my second email about this", "i raised a {form} {when}", "ticket {n}{n}{n}{n}{n}",
    "the amount was {n}{n}{n} pounds", "{when}", "it is about {n}{n}0 euros", "thanks",
    "thank you", "many thanks", "kind regards", "best, sam", "cheers", "thanks in advance",
    "sent from my phone", "let me know if you need anything else", "hope you are well",
    "i am in meetings all day but can take a call", "i am new here so not sure of the process",
    "i spoke to someone on the phone {when}", "nobody has got back to me",
    "i have attached the {form}", "my contract says otherwise", "it says pending in {portal}",
    "i work remotely most of the week", "my start date was {when}",
]

# A smaller remark touching another team, said on the side: the message is not about it.
SIDE = {
    "payroll": ["my {pay} was fine this month though", "i assume this does not affect my {pay}",
                "{payitem} was sorted last time", "not sure if payroll needs to know"],
    "leave": ["i am on {leavetype} from {when}", "i was off sick {when}",
              "{manager} is on {leavetype} so i could not ask them"],
    "benefits": ["i am already in {benefit}", "{benefit} is all fine",
                 "i asked about {benefit} before"],
    "recruiting": ["we are still hiring for {role}", "i only joined after interviewing {when}",
                   "{candidate} also starts soon"],
    "relocation": ["i only just moved to {city}", "i moved here from {city} {when}",
                   "i am still in {housing}"],
    "access": ["my {kit} works fine", "i finally got my {kit} {when}",
               "{portal} is very slow today"],
    "conduct": ["{manager} is very supportive", "i do not want to make a complaint",
                "the team is great otherwise"],
}
ALSO = ["also ", "and ", "one more thing, ", "while i have you, ", "separately, ", "oh and ",
        "unrelated but "]


@dataclass(frozen=True)
class Hr:
    """The text generator's knobs (set from the baselines on seeds 4300-4302, see module)."""

    vague: float = 0.25  # chance the request is only named by a topic ("question about ...")
    side: float = 0.4  # chance of a side remark about another team
    second: float = 0.2  # chance of a second request for another team after the main one
    max_chatter: int = 4  # chatter sentences: 0..max_chatter
    typo: float = 0.08  # chance per word of one edit (swap, drop, double, replace)
    flip: float = 0.03  # label noise


HR = Hr()


def _fill(template: str, rng: np.random.Generator) -> str:
    return quality_tickets.fill(template, SLOTS, rng)


def _message(team: str, rng: np.random.Generator, d: Hr) -> str:
    if rng.random() < d.vague:  # the request named only by its topic
        topic = str(rng.choice(TOPICS[team]))
        sentences = [_fill(str(rng.choice(VAGUE)).replace("{topic}", topic), rng)]
    else:
        sentences = [_fill(str(rng.choice(TEAMS[team])), rng)]
    if rng.random() < d.side:
        other = str(rng.choice([t for t in sorted(SIDE) if t != team]))
        sentences.insert(int(rng.integers(2)) * len(sentences),
                         _fill(str(rng.choice(SIDE[other])), rng))
    if rng.random() < d.second:  # two requests in one message: routed by the first
        other = str(rng.choice([t for t in sorted(TEAMS) if t != team]))
        sentences.append(str(rng.choice(ALSO)) + _fill(str(rng.choice(TEAMS[other])), rng))
    for _ in range(int(rng.integers(d.max_chatter + 1))):
        sentences.insert(int(rng.integers(len(sentences) + 1)),
                         _fill(str(rng.choice(CHATTER)), rng))
    while len(" ".join(sentences).split()) < 8:  # nobody writes to HR in three words
        sentences.insert(int(rng.integers(len(sentences) + 1)),
                         _fill(str(rng.choice(CHATTER)), rng))
    return quality_tickets.written(sentences, rng, d.typo)


def hr(path: Path, rows: int = 1500, seed: int = SEED, d: Hr = HR) -> Path:
    """Write ``rows`` HR-desk messages as JSON lines (``text``, ``label``) to ``path``."""
    rng = np.random.default_rng(seed)
    teams = sorted(TEAMS)
    lines = []
    for _ in range(rows):
        team = str(rng.choice(teams))
        text = _message(team, rng, d)
        label = team if rng.random() >= d.flip else str(rng.choice(teams))
        lines.append(json.dumps({"text": text, "label": label}))
    path.write_text("\n".join(lines) + "\n")
    return path


def baselines(name: str, seed: int, folder: Path) -> dict[str, Any]:
    """Write set ``name`` (only ``hr``) at ``seed`` under ``folder`` and score its baselines."""
    t0 = time.perf_counter()
    if name != "hr":
        raise ValueError(f"unknown set {name!r}: hr")
    path = hr(folder / f"hr-{seed}.jsonl", seed=seed)
    generated = time.perf_counter() - t0
    train, test = quality_baselines.split(quality_baselines.read_rows(path), classifier=True)
    base = quality_baselines.text_baselines("text", train, test)
    return {"dataset": name, "seed": seed, "train_rows": len(train), "test_rows": len(test),
            **base, "generate_seconds": round(generated, 2),
            "total_seconds": round(time.perf_counter() - t0, 1)}


if __name__ == "__main__":  # print a few rows and the baselines: [seed]
    import sys
    import tempfile

    at = int(sys.argv[1]) if len(sys.argv) > 1 else SEED
    with tempfile.TemporaryDirectory() as tmp:
        result = baselines("hr", at, Path(tmp))
        for row in quality_baselines.read_rows(next(Path(tmp).iterdir()))[:6]:
            print(row)
    print(json.dumps(result))
