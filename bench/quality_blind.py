"""Two more held-out text sets for the families-against-baselines check, written blind to models.

Nobody who wrote these had seen a Headrace model's score, its code or its notes: the knobs
(``TRIAGE`` and ``CLAIMS``) were set only from the scikit-learn baselines as
bench/quality_baselines.py fits them (80/20 split, ``random_state=0``; logistic regression with C
by 3-fold CV on a bag of words and on uni+bigrams) on development seeds 4200-4202, aiming at a
uni+bigram logistic regression between 0.70 and 0.90 test accuracy on the default 1,500 rows and
at least 0.03 better again when trained on 15,000 rows (``scaling``), then frozen. Seeds
5000-5002 are reserved for the one final evaluation and were never generated while the knobs were
set; ``SEED`` (5000) is their first. Measured on 4200 / 4201 / 4202 with the frozen knobs
(uni+bigram LR, 1,500 rows -> 15,000 rows): triage 0.790 / 0.767 / 0.837, mean 0.798 -> 0.937 /
0.873 / 0.930, mean 0.913; claims 0.813 / 0.773 / 0.757, mean 0.781 -> 0.843 / 0.843 / 0.870,
mean 0.852.

- ``triage``: emergency-department triage notes, routed to one of 6 specialties (cardiology,
  respiratory, gastro, neurology, orthopaedics, urology). A note has the patient (age, sex, how
  they came), the presenting complaint (said a dozen ways: "c/o ...", "... x3 days", "bib
  ambulance with ..."), associated symptoms, pertinent negatives ("denies palpitations", which
  name another specialty's symptoms), past history that may belong to another specialty,
  observations, allergies and ward chatter. Many complaints are specialty-specific but each
  specialty has a long tail of rare ones; others (chest pain, dizziness, nausea, back pain,
  fever, a fall...) are shared by several. Abbreviations, typos and 3 % flipped labels.
- ``claims``: first notices of loss to a home-and-motor insurer, routed to one of 6 claim types
  (collision, theft, water, fire, storm, liability). A message has an opening, what happened
  (long-tailed per type, with slots for rooms, places, items and roads that every type uses),
  the damage (mostly shared: carpets, ceilings, windows, the car), remarks that rule other
  types out ("nothing was taken", "no one was hurt"), an earlier claim of another type, and
  chatter about policy numbers, quotes, excess and call-backs. Typos and 3 % flipped labels.

Both write JSON lines ``{"text": ..., "label": ...}``. ``python bench/quality_blind.py
triage|claims [seed]`` prints a few rows and the baselines; ``... scaling triage|claims [seed]``
the uni+bigram baseline at 1,500 and 15,000 rows.
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

SEED = 5000  # the held-out seeds are 5000-5002; the knobs were set on 4200-4202

Pool = list[str]
NUMBERS = {"n": (0, 10), "age": (16, 97), "hr": (48, 141), "rr": (12, 33), "sbp": (90, 200),
           "dbp": (50, 115)}


def _pick(pool: Pool, rng: np.random.Generator, tail: float) -> str:
    """One item of ``pool``, the first ones the most common (Zipf-like with exponent ``tail``)."""
    w = 1.0 / np.arange(1, len(pool) + 1) ** tail
    return pool[int(rng.choice(len(pool), p=w / w.sum()))]


def _fill(template: str, slots: dict[str, Pool], rng: np.random.Generator, tail: float) -> str:
    out = template
    while "{" in out:
        start = out.index("{")
        key = out[start + 1:out.index("}", start)]
        pick = (str(rng.integers(*NUMBERS[key])) if key in NUMBERS  # a digit, an age, an obs
                else _pick(slots[key], rng, tail))
        out = out.replace("{" + key + "}", pick, 1)
    return out


def _finish(parts: list[str], rng: np.random.Generator, typo: float, capitals: float,
            stops: list[str]) -> str:
    out = []
    for s in parts:
        words = [quality_tickets.typo(w, rng) if w.isalpha() and rng.random() < typo else w
                 for w in s.split()]
        text = " ".join(words)
        if rng.random() < capitals:
            text = text[:1].upper() + text[1:]
        out.append(text + str(rng.choice(stops)))
    return " ".join(out).strip()


def _write(path: Path, texts: list[str], labels: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n"
                            for t, y in zip(texts, labels, strict=True)))
    return path


# --- triage: emergency-department notes to specialties ----------------------------------------

TRIAGE_SLOTS: dict[str, Pool] = {
    "dur": ["for 2 hours", "x3 days", "since this morning", "since last night", "for a week",
            "on and off for a month", "x 2/7", "for 30 mins", "since yesterday", "for 4 days",
            "x1 week", "since lunchtime", "for about an hour", "for several weeks"],
    "side": ["left", "right", "l", "r"],
    "cat": ["1", "2", "3", "3", "4", "5"],
    "who": ["wife", "husband", "daughter", "son", "carer", "partner", "mother", "friend"],
}

# Presenting complaints that belong to one specialty, the common ones first.
TRIAGE_OWN: dict[str, Pool] = {
    "cardiology": [
        "central chest pain", "chest tightness", "palpitations", "chest pain radiating to the "
        "{side} arm", "chest pressure on exertion", "racing heart", "irregular heartbeat",
        "swollen ankles", "pain radiating to the jaw", "heart pounding", "chest heaviness",
        "breathless lying flat", "waking up gasping at night", "fluttering in the chest",
        "cold sweats with chest discomfort", "near syncope on standing",
        "pacemaker site sore", "pain between the shoulder blades with sweating",
        "heart rate of 150 on his watch", "chest pain after cocaine use", "defib fired twice",
        "bp 210/120 at the pharmacy", "pain worse leaning forward after a virus",
        "bluish lips on exertion", "tearing pain through to the back",
        "exercise tolerance down to one flight of stairs", "needs 3 pillows to sleep",
        "gtn spray not helping", "blackout while jogging", "bilateral leg oedema"],
    "respiratory": [
        "shortness of breath on exertion", "wheeze", "productive cough",
        "coughing up blood", "cough with green sputum", "sharp pain on breathing in",
        "cannot complete sentences", "tight chest with wheeze", "inhaler not helping",
        "cough for three weeks", "breathless at rest", "noisy breathing",
        "high temperature and cough", "pleuritic chest pain", "sats dropping at home",
        "barking cough", "night sweats and weight loss", "chest infection not improving on "
        "antibiotics", "rattly chest", "sudden breathlessness after a long flight",
        "hoarse voice and cough", "smoke inhalation", "coughing fits", "using accessory "
        "muscles", "peak flow 150", "nebuliser at home not working", "frothy sputum",
        "breathless walking to the car", "blue inhaler every hour", "stridor"],
    "gastro": [
        "abdominal pain in the right lower quadrant", "vomiting blood", "black tarry stools",
        "diarrhoea for five days", "epigastric pain after meals", "blood in stool",
        "jaundice", "yellow eyes", "distended abdomen", "unable to keep fluids down",
        "constipation for a week", "right upper quadrant pain after fatty food",
        "heartburn", "difficulty swallowing", "food stuck in the throat", "bloating",
        "pain around the belly button moving to the right", "vomiting after a takeaway",
        "fresh red blood pr", "rectal bleeding", "loose stools and cramps",
        "painful lump in the groin when coughing", "weight loss and poor appetite",
        "coffee ground vomit", "pale stools and itchy skin", "abdo pain after binge drinking",
        "peg tube fell out", "stoma not working", "swallowed a fish bone",
        "liver tenderness"],
    "neurology": [
        "worst headache of her life", "sudden weakness in the {side} arm", "slurred speech",
        "facial droop", "seizure at home", "fit lasting 5 minutes", "double vision",
        "word finding difficulty", "numbness down one side", "vertigo with vomiting",
        "loss of vision in one eye", "tremor getting worse", "head injury and drowsy",
        "tingling in both feet", "unsteady walking", "memory loss", "migraine with aura",
        "loc after head knock", "jerking movements of the arm", "foot drop",
        "neck stiffness and photophobia", "pins and needles in the {side} hand",
        "severe headache on waking", "vision went black briefly", "face numb on one side",
        "thunderclap headache", "post ictal on arrival", "tongue bitten and incontinent",
        "drooping eyelid", "cannot find words since breakfast"],
    "orthopaedics": [
        "painful swollen ankle after twisting it", "cannot weight bear on the {side} leg",
        "wrist pain after foosh", "shoulder dislocated playing rugby", "hip pain after a fall",
        "deformed forearm", "knee locked and wont straighten", "lower back pain after lifting",
        "neck pain after a car accident", "finger caught in a door",
        "painful shin after a football tackle", "heel pain when walking",
        "collarbone pain after falling off a bike", "knee gave way",
        "elbow pain unable to straighten the arm", "suspected broken toe", "sprained wrist",
        "felt a pop in the calf while running", "shortened and rotated leg",
        "swollen knee after skiing", "tailbone pain after slipping on ice",
        "thumb injury goalkeeping", "cast too tight fingers tingling",
        "rib pain after falling off a ladder", "dislocated kneecap", "mallet finger",
        "achilles snapped playing squash", "scaphoid tenderness", "open wound over the shin "
        "bone visible", "back spasm cannot get out of bed"],
    "urology": [
        "blood in urine", "burning when passing urine", "loin to groin pain",
        "cannot pass urine", "urinary retention", "flank pain coming in waves",
        "catheter blocked", "frequency and urgency", "testicular pain", "swollen testicle",
        "cloudy smelly urine", "{side} sided pain radiating to the groin", "kidney pain",
        "passing stones", "dark urine", "urine output dropped", "leaking around the catheter",
        "pain at the tip of the penis", "rigors with dysuria", "cannot wee and lower abdo pain",
        "scrotal swelling", "weeing every hour", "new bed wetting", "clots in urine",
        "nephrostomy leaking", "stent pain after lithotripsy", "painful erection for 5 hours",
        "suprapubic pain", "urine like coca cola", "retention after surgery"],
}

# Complaints several specialties see.
TRIAGE_SHARED: dict[str, list[str]] = {
    "chest pain": ["cardiology", "respiratory", "gastro", "orthopaedics"],
    "shortness of breath": ["cardiology", "respiratory"],
    "sob": ["cardiology", "respiratory"],
    "dizziness": ["cardiology", "neurology"],
    "nausea": ["gastro", "cardiology", "neurology", "urology"],
    "vomiting": ["gastro", "neurology", "urology"],
    "back pain": ["orthopaedics", "urology", "cardiology"],
    "abdominal pain": ["gastro", "urology"],
    "abdo pain": ["gastro", "urology"],
    "fever": ["respiratory", "urology", "gastro"],
    "headache": ["neurology", "cardiology"],
    "weakness": ["neurology", "orthopaedics", "cardiology"],
    "tiredness": ["cardiology", "respiratory", "gastro", "urology"],
    "collapse": ["cardiology", "neurology"],
    "fall at home": ["orthopaedics", "neurology", "cardiology"],
    "sweating": ["cardiology", "gastro", "urology"],
    "pain on deep breath": ["respiratory", "orthopaedics", "cardiology"],
    "confusion": ["neurology", "urology", "respiratory"],
    "numbness": ["neurology", "orthopaedics"],
    "swelling": ["orthopaedics", "cardiology", "urology"],
    "feeling unwell": ["cardiology", "respiratory", "gastro", "neurology", "urology"],
    "side pain": ["urology", "gastro", "orthopaedics"],
    "lower abdominal pain": ["gastro", "urology"],
    "loss of appetite": ["gastro", "respiratory"],
    "cough": ["respiratory", "cardiology"],
    "shoulder pain": ["orthopaedics", "cardiology", "gastro"],
    "leg pain": ["orthopaedics", "cardiology"],
    "arm pain": ["orthopaedics", "cardiology", "neurology"],
    "neck pain": ["orthopaedics", "neurology"],
    "blurred vision": ["neurology", "cardiology"],
    "pain": ["cardiology", "gastro", "orthopaedics", "urology"],
    "generally off legs": ["neurology", "orthopaedics", "urology", "respiratory"],
}

TRIAGE_HISTORY: dict[str, Pool] = {
    "cardiology": ["af", "ihd", "mi in 2019", "two stents", "heart failure", "angina",
                   "high cholesterol", "valve replacement", "pacemaker", "cabg x3"],
    "respiratory": ["asthma", "copd", "40 pack years", "bronchiectasis", "previous pe",
                    "sleep apnoea", "tb as a child", "home oxygen", "lung ca", "pneumonia"],
    "gastro": ["crohns", "ibs", "gallstones", "appendicectomy", "reflux", "uc",
               "fatty liver", "alcohol excess", "pancreatitis", "coeliac"],
    "neurology": ["epilepsy", "migraine", "previous stroke", "tia last year", "ms",
                  "parkinsons", "meningioma", "head injury in 2020", "dementia", "vp shunt"],
    "orthopaedics": ["osteoporosis", "hip replacement", "knee replacement", "osteoarthritis",
                     "wrist fracture", "gout", "spinal fusion", "rheumatoid arthritis",
                     "acl repair", "scoliosis"],
    "urology": ["kidney stones", "ckd 3", "bph", "recurrent utis", "long term catheter",
                "bladder ca", "single kidney", "dialysis", "turp", "renal transplant"],
}

TRIAGE_OPEN: Pool = [
    "{age}yo m", "{age}yo f", "{age} year old male", "{age} year old female",
    "pt is a {age} year old man", "pt is a {age} year old woman", "{age}m", "{age}f",
    "bib ambulance", "walk in", "self presented", "referred by gp", "brought in by {who}",
    "transfer from the walk in centre", "called 111 and told to attend", "nursing home resident",
]
TRIAGE_SAY: Pool = [
    "c/o {s} {dur}", "presents with {s}", "{s} since last night", "complaining of {s} {dur}",
    "pt reports {s}", "{s}, onset {dur} ago", "sudden onset {s}", "gradual {s} {dur}",
    "{s} x{n} days", "attends with {s}", "gp letter re {s}", "bib ambulance with {s}",
    "states {s} started {dur} ago", "{s}", "{s} {dur}", "pc: {s}", "here with {s}",
    "{who} says {s}", "worried about {s}", "has had {s} {dur}",
]
TRIAGE_ALSO: Pool = ["also {s}", "with {s}", "associated {s}", "+ {s}", "some {s}",
                     "mild {s}", "reports {s} too", "and {s}", "plus {s} {dur}"]
TRIAGE_DENY: Pool = ["denies {s}", "no {s}", "nil {s}", "{s} denied", "no hx of {s}",
                     "no {s} reported", "no complaint of {s}"]
TRIAGE_HX: Pool = ["pmh {h}", "hx {h}", "known {h}", "background of {h}", "previous {h}",
                   "on meds for {h}", "under the clinic for {h}", "pmhx: {h}"]
TRIAGE_CHAT: Pool = [
    "bp {sbp}/{dbp}", "hr {hr}", "sats 9{n}% ra", "temp 3{n}.{n}", "rr {rr}",
    "gcs 15", "obs stable", "news {n}", "lives alone", "{who} at bedside", "nkda",
    "allergic to penicillin", "t2dm", "on warfarin", "on apixaban", "hypertensive",
    "took paracetamol with little effect", "pain score {n}/10", "anxious", "ecg done",
    "bloods sent", "cannula in", "awaiting review", "seen here last month",
    "non smoker", "drinks socially", "no recent travel", "poor historian",
    "interpreter needed", "frail", "independent at baseline", "fit and well normally",
    "cbg {n}.{n}", "waiting room", "for senior review", "given oramorph", "ambulance obs "
    "similar", "triage cat {cat}", "vaccinated", "recently started new meds", "pregnancy test "
    "neg", "well on arrival", "mobilising with a stick", "self caring",
]


@dataclass(frozen=True)
class Triage:
    """The triage generator's knobs (set from the baselines on seeds 4200-4202, see module)."""

    own: float = 0.85  # chance the presenting complaint is specific to the specialty
    max_also: int = 2  # associated symptoms: 0..max_also
    also_own: float = 0.5  # chance an associated symptom is specific (else a shared one)
    max_deny: int = 1  # pertinent negatives (another specialty's symptoms): 0..max_deny
    history: float = 0.5  # chance of a past history line
    history_own: float = 0.5  # chance the history belongs to the note's specialty
    max_chatter: int = 4  # obs and chatter lines: 0..max_chatter
    tail: float = 1.3  # Zipf exponent of every pool: higher, fewer rare phrases
    typo: float = 0.05  # chance per word of one edit (swap, drop, double, replace)
    flip: float = 0.03  # label noise


TRIAGE = Triage()


def _shared(label: str, table: dict[str, list[str]], rng: np.random.Generator) -> str:
    fits = [k for k, v in table.items() if label in v]
    return str(rng.choice(fits))


def _note(label: str, rng: np.random.Generator, d: Triage) -> str:
    slots = dict(TRIAGE_SLOTS)

    def symptom(own: float) -> str:
        if rng.random() < own:
            return _fill(_pick(TRIAGE_OWN[label], rng, d.tail), slots, rng, d.tail)
        return _shared(label, TRIAGE_SHARED, rng)

    parts = [_fill(_pick(TRIAGE_SAY, rng, d.tail).replace("{s}", symptom(d.own)), slots, rng,
                   d.tail)]
    for _ in range(int(rng.integers(d.max_also + 1))):
        parts.append(_fill(str(rng.choice(TRIAGE_ALSO)).replace("{s}", symptom(d.also_own)),
                           slots, rng, d.tail))
    others = [k for k in sorted(TRIAGE_OWN) if k != label]
    for _ in range(int(rng.integers(d.max_deny + 1))):
        other = str(rng.choice(others))
        said = _fill(_pick(TRIAGE_OWN[other], rng, d.tail), slots, rng, d.tail)
        parts.insert(int(rng.integers(1, len(parts) + 1)),
                     str(rng.choice(TRIAGE_DENY)).replace("{s}", said))
    if rng.random() < d.history:
        whose = label if rng.random() < d.history_own else str(rng.choice(others))
        parts.append(str(rng.choice(TRIAGE_HX)).replace("{h}", _pick(TRIAGE_HISTORY[whose],
                                                                      rng, d.tail)))
    for _ in range(int(rng.integers(d.max_chatter + 1))):
        parts.insert(int(rng.integers(len(parts) + 1)),
                     _fill(str(rng.choice(TRIAGE_CHAT)), slots, rng, d.tail))
    if rng.random() < 0.7:  # most notes open with who the patient is
        parts.insert(0, _fill(str(rng.choice(TRIAGE_OPEN)), slots, rng, d.tail))
    return _finish(parts, rng, d.typo, 0.3, [".", ",", ".", "", " -", ";"])


def triage(path: Path, rows: int = 1500, seed: int = SEED, d: Triage = TRIAGE) -> Path:
    rng = np.random.default_rng(seed)
    labels = sorted(TRIAGE_OWN)
    texts, ys = [], []
    for _ in range(rows):
        label = str(rng.choice(labels))
        texts.append(_note(label, rng, d))
        ys.append(label if rng.random() >= d.flip else str(rng.choice(labels)))
    return _write(path, texts, ys)


# --- claims: insurance first notices of loss to claim types -----------------------------------

CLAIM_SLOTS: dict[str, Pool] = {
    "place": ["car park", "station", "gym", "supermarket", "school", "pub", "office",
              "town centre", "hospital", "retail park", "leisure centre", "church", "cinema"],
    "room": ["kitchen", "bathroom", "living room", "hallway", "bedroom", "loft",
             "utility room", "garage", "dining room", "conservatory", "cellar", "landing"],
    "item": ["laptop", "sat nav", "tools", "handbag", "golf clubs", "phone", "camera",
             "sunglasses", "ipad", "wedding ring", "watch", "bike", "drone", "guitar",
             "work van tools", "pushchair"],
    "thing": ["car", "roof", "garage", "shed", "conservatory", "fence", "greenhouse",
              "neighbour's car", "garden wall", "caravan", "van", "extension"],
    "road": ["a country lane", "the a40", "the bypass", "the m6", "the high street",
             "a roundabout", "a mini roundabout", "the school run", "a junction",
             "the ring road", "a single track road"],
    "when": ["yesterday", "last night", "this morning", "on saturday", "over the weekend",
             "on the 14th", "two days ago", "last week", "while we were on holiday",
             "at about {n}pm", "on boxing day", "early this morning"],
    "car": ["car", "vehicle", "van", "motorbike", "mini", "golf", "corsa", "transit",
            "tesla", "focus", "company car"],
}

CLAIM_OWN: dict[str, Pool] = {
    "collision": [
        "another car rear-ended me at the lights", "i reversed into a bollard in the {place}",
        "a van pulled out and hit my passenger door", "i skidded on ice and hit a wall",
        "someone hit my parked {car} and drove off", "i hit a deer on {road}",
        "a lorry side-swiped me on {road}", "i clipped a parked car's mirror",
        "i collided with a cyclist at a junction", "my {car} went into a ditch",
        "a taxi drove into the back of me", "head-on collision on {road}",
        "the car in front braked suddenly and i went into it",
        "i scraped the side on a pillar in the multi-storey", "a bus clipped my wing mirror",
        "my {car} was written off in a crash", "a tractor reversed into my bonnet",
        "i swerved to avoid a dog and hit a lamp post", "a shunt at {road}",
        "the driver behind failed to stop", "i lost control on gravel",
        "my son crashed my {car}", "i hit the barrier on the slip road",
        "a learner driver pulled into my lane", "someone opened their door into my {car}",
        "we were t-boned at a crossroads", "i misjudged the gap and hit the other car",
        "a delivery van reversed into my {car} outside the {place}",
        "my {car} rolled down the drive into a wall", "the other driver ran a red light"],
    "theft": [
        "my {item} was stolen from outside the {place}", "the house was burgled {when}",
        "thieves broke in through the back door", "my {car} was stolen from the driveway",
        "the catalytic converter was stolen", "my {item} was stolen from my {car}",
        "my handbag was snatched in town", "the shed was broken into and my {item} taken",
        "my {item} was stolen on the train", "jewellery is missing after a break in",
        "someone smashed the {car} window and took my {item}",
        "a parcel was stolen from my doorstep", "the keys were stolen and the {car} taken",
        "my wallet was pickpocketed", "my {item} was stolen from the hotel room",
        "the garage lock was forced and the {item} taken", "the number plates were stolen",
        "the van was broken into overnight", "someone stole the garden furniture",
        "our caravan was stolen from the storage site", "burglars took the tv and my {item}",
        "my {item} disappeared from the changing room at the {place}",
        "the bike lock was cut at the {place}", "keyless theft of my {car} overnight",
        "my purse was taken from my basket", "someone took the {item} from the porch",
        "the wheels were stolen off my {car}", "a distraction burglary by fake workmen",
        "my {item} was taken from my desk at the {place}", "the diesel was siphoned"],
    "water": [
        "a pipe burst in the {room}", "the washing machine leaked",
        "the upstairs neighbour's bath overflowed into our {room}",
        "water is coming through the ceiling", "the dishwasher hose split",
        "the toilet overflowed", "a leak under the sink rotted the cupboards",
        "a radiator valve failed", "the boiler leaked", "the water tank in the loft split",
        "the shower tray cracked and leaked for months", "a frozen pipe burst",
        "a damp patch is spreading from a hidden leak", "the fish tank broke",
        "the overflow pipe failed", "the fridge water hose burst",
        "the {room} ceiling collapsed from the leak", "a joint behind the bath is leaking",
        "sewage backed up into the {room}", "the hot water cylinder burst",
        "a plumber drilled through a pipe", "the bath seal failed and water got under the "
        "floor", "the stopcock would not turn off", "the outside tap split and flooded the "
        "{room}", "the underfloor heating is leaking", "the soil stack leaked into the wall",
        "the kitchen tap connector sprang a leak", "the combi boiler dumped water",
        "a leak in the flat above came through our light fittings",
        "the en suite pipework failed"],
    "fire": [
        "there was a kitchen fire from a chip pan", "a fire started in the {room}",
        "an electrical fire from a faulty socket", "the tumble dryer caught fire",
        "a candle set the curtains alight", "there is smoke damage throughout the house",
        "my {car} caught fire on {road}", "the bbq set fire to the fence",
        "we had a chimney fire", "the toaster caught fire",
        "an e-bike battery exploded and burnt the {room}",
        "fire spread from the neighbour's house", "the garage burnt down",
        "my {car} was set alight by arsonists", "a wiring fault caused a fire in the loft",
        "the oven caught fire", "a hot pan scorched the worktop",
        "sparks came from the fuse box and the {room} filled with smoke",
        "a bonfire spread to the shed", "a cigarette burnt a hole in the sofa",
        "the extractor fan melted and caught fire", "a phone charger overheated and burnt the "
        "bed", "the log burner set the beam alight", "the engine bay of my {car} went up in "
        "flames", "a heater set fire to the {room}", "fireworks landed on the roof and it "
        "caught", "the thatch caught fire", "the hair straighteners burnt the carpet",
        "the fridge freezer caught fire", "smoke from a fire next door got into everything"],
    "storm": [
        "high winds blew tiles off the roof", "a tree fell on the {thing} during the storm",
        "the fence blew down in the gales", "hail dented my {car}",
        "lightning struck the chimney", "flash flooding filled the ground floor",
        "the river burst its banks and flooded the house",
        "the storm damaged the conservatory", "the gutters were ripped off by the wind",
        "the satellite dish blew off", "the roof is leaking after heavy rain",
        "heavy snow collapsed the carport", "the shed roof was torn off in the storm",
        "the garden wall collapsed in the wind", "a lightning surge fried the tv",
        "the storm drain overflowed into the garage", "flood water came under the door",
        "the wind blew the trampoline into next door's {car}",
        "branches smashed the greenhouse", "hailstones cracked the skylight",
        "storm eunice took the ridge tiles", "the flat roof felt lifted in the wind",
        "the chimney pot came down in the gale", "surface water flooded the {room}",
        "a falling branch crushed my {car}", "snow melt came through the roof",
        "the wind ripped the solar panels loose", "the cellar flooded in the downpour",
        "the aerial came down in the storm", "a tornado went through the village"],
    "liability": [
        "a visitor slipped on our wet floor and broke her wrist", "my dog bit a neighbour",
        "a delivery driver tripped on our front step", "my son's football broke next door's "
        "window", "a customer fell in my shop", "the neighbour says our extension cracked "
        "their wall", "my tenant hurt himself on a loose stair",
        "someone tripped over a paving slab outside my house",
        "i spilt paint on the landlord's carpet", "a child was hurt on our trampoline",
        "i knocked over a tv at a friend's house", "the flat below is claiming for water "
        "from our flat", "a cyclist says my car door hit him",
        "the gardener cut his hand on our mower", "a guest burnt herself on our stove",
        "our horse got loose and damaged a {car}", "the neighbour is suing over our hedge",
        "i dropped a borrowed camera", "our builder's ladder fell on a passer-by",
        "a child fell off our garden wall", "my cat scratched a neighbour's child",
        "a tile from our roof hit a parked {car}", "a party guest fell down our stairs",
        "i am being sued for an injury at my house", "our dog ran into the road and caused "
        "an accident", "a window cleaner fell from his ladder at our house",
        "my golf ball smashed a windscreen", "a solicitor's letter says someone was injured on "
        "our drive", "i broke a vase in a holiday cottage", "my tree roots damaged the "
        "neighbour's drains"],
}

CLAIM_SHARED: dict[str, list[str]] = {
    "the carpet is ruined": ["water", "fire", "storm", "liability"],
    "the ceiling is stained": ["water", "storm", "fire"],
    "the door frame is damaged": ["theft", "storm", "collision"],
    "a window is broken": ["theft", "storm", "liability", "fire"],
    "the bumper is cracked": ["collision", "liability", "theft", "storm"],
    "the {car} is undriveable": ["collision", "fire", "storm", "theft"],
    "the electrics are not working": ["water", "fire", "storm"],
    "the {item} is ruined": ["water", "fire", "storm"],
    "we had to move out for a week": ["water", "fire", "storm"],
    "the kitchen units need replacing": ["water", "fire"],
    "someone was hurt": ["liability", "collision", "fire"],
    "the police gave me a crime reference": ["theft", "collision"],
    "the fire brigade came out": ["fire", "storm", "collision"],
    "the roof is damaged": ["storm", "fire", "liability"],
    "the fence is damaged": ["storm", "collision", "liability", "fire"],
    "my neighbour's {car} was damaged": ["liability", "storm", "collision", "fire"],
    "the plaster needs redoing": ["water", "fire", "storm"],
    "the floorboards are lifting": ["water", "storm"],
    "the wall is cracked": ["collision", "storm", "liability"],
    "the door will not lock now": ["theft", "storm", "collision"],
    "the paintwork is scratched": ["collision", "theft", "storm"],
    "the garage door is wrecked": ["collision", "storm", "theft", "fire"],
    "there is a horrible smell": ["water", "fire"],
    "the {car} needs a new windscreen": ["collision", "storm", "theft", "liability"],
    "they are asking me to pay for it": ["liability", "collision"],
    "the damage is to the {room}": ["water", "fire", "storm", "theft"],
    "the sofa is damaged": ["water", "fire", "liability"],
    "i was not there at the time": ["theft", "water", "fire", "storm"],
}

# Remarks that rule a type out; their words belong to the type they rule out.
CLAIM_NOT: dict[str, Pool] = {
    "collision": ["no other vehicle was involved", "nobody crashed into anything",
                  "the {car} was not hit"],
    "theft": ["nothing was stolen", "nothing was taken", "there was no break in",
              "it was not burglars"],
    "water": ["there is no water damage", "no pipes were leaking", "nothing leaked"],
    "fire": ["there was no fire", "nothing was burnt", "no smoke damage"],
    "storm": ["it was not the weather", "there was no storm that night", "the wind was calm"],
    "liability": ["no one was hurt", "nobody is claiming against me", "no one was injured"],
}
CLAIM_BEFORE: dict[str, Pool] = {
    "collision": ["i claimed for a crash {n} years ago", "you sorted my accident last year"],
    "theft": ["we were burgled two years ago", "my {item} was stolen last year as well"],
    "water": ["we had a burst pipe claim before", "the last claim was a leak in the {room}"],
    "fire": ["we had a small fire claim in 2019", "after the fire last year"],
    "storm": ["the roof was done after the last storm", "we had storm damage last winter"],
    "liability": ["a neighbour claimed against us once", "last time it was a dog bite claim"],
}

CLAIM_OPEN: Pool = [
    "hello", "hi", "dear sir or madam", "good afternoon", "to whom it may concern",
    "i would like to make a claim", "i need to report an incident", "i want to report a claim",
    "hi, making a claim on my policy", "please can you open a claim", "hello, first claim "
    "for me", "i was told to email this in",
]
CLAIM_SAY: Pool = [
    "{e} {when}", "{when} {e}", "{e}", "unfortunately {e}", "i am writing because {e}",
    "{e} and i need to claim", "we came home to find {e}", "to explain, {e}",
    "i got a call {when} to say {e}", "basically {e}", "{when}, {e}", "sadly {e} {when}",
]
CLAIM_CHAT: Pool = [
    "my policy number is {n}{n}{n}{n}{n}{n}{n}", "i have been with you for {n} years",
    "photos attached", "i have a quote for {n}{n}00 pounds", "please call me back",
    "this is my first claim", "what is my excess", "i am really stressed about it",
    "the kids are fine", "sorry for the long message", "the reference from the call was "
    "{n}{n}{n}{n}", "do i need three quotes", "can i use my own repairer", "we rent the "
    "property", "email is best as i work nights", "it happened {when}", "at about {n}pm",
    "my husband usually deals with this", "thanks", "many thanks", "kind regards",
    "regards, j smith", "sent from my phone", "i can send receipts", "is this covered",
    "how long will it take", "i need a courtesy car", "we have contents and buildings cover",
    "the landlord knows", "i have a video on my phone", "it is a rented flat",
    "please advise next steps", "i already paid for an emergency repair",
]


@dataclass(frozen=True)
class Claims:
    """The claims generator's knobs (set from the baselines on seeds 4200-4202, see module)."""

    own: float = 0.7  # chance what happened is said in the type's own words (else only damage)
    max_damage: int = 2  # damage remarks (shared by several types): 0..max_damage
    max_not: int = 1  # remarks ruling another type out: 0..max_not
    before: float = 0.2  # chance of a mention of an earlier claim of another type
    max_chatter: int = 4  # chatter sentences: 0..max_chatter
    tail: float = 1.0  # Zipf exponent of every pool: higher, fewer rare phrases
    typo: float = 0.05  # chance per word of one edit (swap, drop, double, replace)
    flip: float = 0.03  # label noise


CLAIMS = Claims()


def _claim(label: str, rng: np.random.Generator, d: Claims) -> str:
    slots = CLAIM_SLOTS
    if rng.random() < d.own:
        event = _fill(_pick(CLAIM_OWN[label], rng, d.tail), slots, rng, d.tail)
    else:
        event = _fill(_shared(label, CLAIM_SHARED, rng), slots, rng, d.tail)
    parts = [_fill(_pick(CLAIM_SAY, rng, d.tail).replace("{e}", event), slots, rng, d.tail)]
    for _ in range(int(rng.integers(d.max_damage + 1))):
        parts.append(_fill(_shared(label, CLAIM_SHARED, rng), slots, rng, d.tail))
    others = [k for k in sorted(CLAIM_OWN) if k != label]
    for _ in range(int(rng.integers(d.max_not + 1))):
        parts.append(_fill(str(rng.choice(CLAIM_NOT[str(rng.choice(others))])), slots, rng,
                           d.tail))
    if rng.random() < d.before:
        parts.append(_fill(str(rng.choice(CLAIM_BEFORE[str(rng.choice(others))])), slots, rng,
                           d.tail))
    for _ in range(int(rng.integers(d.max_chatter + 1))):
        parts.insert(int(rng.integers(len(parts) + 1)),
                     _fill(str(rng.choice(CLAIM_CHAT)), slots, rng, d.tail))
    if rng.random() < 0.5:
        parts.insert(0, str(rng.choice(CLAIM_OPEN)))
    return _finish(parts, rng, d.typo, 0.6, [".", ".", "!", "", ","])


def claims(path: Path, rows: int = 1500, seed: int = SEED, d: Claims = CLAIMS) -> Path:
    rng = np.random.default_rng(seed)
    labels = sorted(CLAIM_OWN)
    texts, ys = [], []
    for _ in range(rows):
        label = str(rng.choice(labels))
        texts.append(_claim(label, rng, d))
        ys.append(label if rng.random() >= d.flip else str(rng.choice(labels)))
    return _write(path, texts, ys)


# --- baselines ---------------------------------------------------------------------------------

SETS = {"triage": triage, "claims": claims}


def _make(name: str, folder: Path, rows: int, seed: int) -> Path:
    if name not in SETS:
        raise ValueError(f"unknown set {name!r}: triage or claims")
    return SETS[name](folder / f"{name}-{seed}-{rows}.jsonl", rows=rows, seed=seed)


def baselines(name: str, seed: int, folder: Path) -> dict[str, Any]:
    """Write set ``name`` at ``seed`` under ``folder`` and score its baselines."""
    t0 = time.perf_counter()
    path = _make(name, folder, 1500, seed)
    generated = time.perf_counter() - t0
    train, test = quality_baselines.split(quality_baselines.read_rows(path), classifier=True)
    base = quality_baselines.text_baselines("text", train, test)
    return {"dataset": name, "seed": seed, "train_rows": len(train), "test_rows": len(test),
            **base, "generate_seconds": round(generated, 2),
            "total_seconds": round(time.perf_counter() - t0, 1)}


def scaling(name: str, seed: int, folder: Path, big: int = 15_000) -> dict[str, Any]:
    """The uni+bigram baseline on the default 1,500 rows (80/20) and trained on ``big`` rows of
    the same seed, scored on 300 more (stratified, ``random_state=0``): is the set saturated?"""
    import warnings

    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline

    small = baselines(name, seed, folder)["bigram_lr"]
    rows = quality_baselines.read_rows(_make(name, folder, big + 300, seed))
    train, test = train_test_split(rows, test_size=300, stratify=[r["label"] for r in rows],
                                   random_state=0)
    model = make_pipeline(CountVectorizer(ngram_range=(1, 2)),
                          LogisticRegressionCV(Cs=[0.1, 1.0, 10.0], cv=3, max_iter=3000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit([r["text"] for r in train], [r["label"] for r in train])
    large = float(model.score([r["text"] for r in test], [r["label"] for r in test]))
    return {"dataset": name, "seed": seed, "bigram_lr_1500": small,
            f"bigram_lr_{big}": round(large, 4), "gain": round(large - small, 4)}


if __name__ == "__main__":  # rows and baselines: triage|claims [seed]; scaling triage|claims [seed]
    import sys
    import tempfile

    args = sys.argv[1:]
    scale = bool(args) and args[0] == "scaling"
    args = args[1:] if scale else args
    which = args[0] if args else "triage"
    at = int(args[1]) if len(args) > 1 else SEED
    with tempfile.TemporaryDirectory() as tmp:
        if scale:
            print(json.dumps(scaling(which, at, Path(tmp))))
        else:
            result = baselines(which, at, Path(tmp))
            for row in quality_baselines.read_rows(next(Path(tmp).iterdir()))[:6]:
                print(row)
            print(json.dumps(result))
