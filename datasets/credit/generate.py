"""The credit generator: invented issuers, instruments, rating actions, ownership, countries and
contacts, with every trap of the domain planted several times.

Deterministic: the same (variant, seed) gives the same rows, in the same order, so the built
files are byte-identical. The *cast* — the issuers the questions name — keeps its names and LEIs
at every seed; the seed moves their ratings, dates and shares within bounds that keep each trap
biting (the seed-property test checks it), and fills the world around them with random issuers.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import string
from typing import Any

from pytest_kgbench.packs import Draws

from .rules import RANK, SCALE

Row = dict[str, Any]

# code, name, sovereign rank range, ceiling uplift range
COUNTRIES = (
    ("XA", "Aldoria", (0, 0), (0, 1)),
    ("XB", "Brevonia", (1, 3), (1, 2)),
    ("XC", "Caldera", (4, 6), (1, 2)),
    ("XD", "Dunmark", (7, 9), (1, 2)),
    ("XE", "Estavia", (1, 3), (0, 1)),
    ("XF", "Feroe", (10, 12), (1, 1)),
    ("XG", "Galdor", (13, 14), (1, 2)),
    ("XH", "Halvaria", (4, 6), (0, 0)),
)
SANDBOX_COUNTRIES = ("XA", "XB", "XD")   # test records live only here (L1/L2 stay clean)
SECTORS = ("Utilities", "Industrials", "Telecoms", "Energy", "Consumer", "Materials",
           "Real Estate")
PHONE_CODES = {"XA": "+881", "XB": "+882", "XC": "+883", "XD": "+884", "XE": "+885",
               "XF": "+886", "XG": "+887", "XH": "+888"}
ROOTS = ("Alder", "Brisk", "Cinder", "Dovetail", "Ember", "Fjord", "Glint", "Heron", "Iris",
         "Juniper", "Kiln", "Larch", "Mistral", "Nimbus", "Onyx", "Pinion", "Quill", "Rowan",
         "Saffron", "Tundra", "Umber", "Vesper", "Willow", "Yarrow", "Zephyr", "Argent", "Basalt",
         "Corvid", "Drumlin", "Estuary", "Fenwick", "Gannet", "Hollin", "Ingot", "Jasper",
         "Kestle", "Lodestar", "Marram", "Nettle", "Osprey", "Pewter", "Quartz", "Rushmore",
         "Shingle", "Thistle", "Upland", "Verdant", "Wessex", "Yew", "Zinnia")
NOUNS = {"Utilities": ("Water", "Power", "Gas", "Grid"),
         "Industrials": ("Engineering", "Machinery", "Rail", "Aerospace"),
         "Telecoms": ("Telecom", "Networks", "Mobile", "Cable"),
         "Energy": ("Energy", "Petroleum", "Renewables", "Drilling"),
         "Consumer": ("Foods", "Brewing", "Retail", "Apparel"),
         "Materials": ("Steel", "Chemicals", "Paper", "Glass"),
         "Real Estate": ("Properties", "Estates", "Realty", "Land"),
         "Financials": ("Bank", "Capital", "Savings", "Finance")}
SUFFIXES = ("plc", "AG", "SA", "NV", "Ltd", "Corp", "GmbH", "SpA", "AB", "Oy")
FIRST = ("Ada", "Bram", "Clara", "Dmitri", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas",
         "Kaia", "Luca", "Maren", "Nils", "Olga", "Pavel", "Rhea", "Soren", "Tilde", "Ugo",
         "Vera", "Wim", "Yara", "Zeno")
LAST = ("Aalto", "Berg", "Castell", "Dahl", "Eske", "Falk", "Gruber", "Holm", "Ivers", "Janssen",
        "Kerr", "Lind", "Moreau", "Novak", "Ortiz", "Petrov", "Quist", "Rossi", "Sato", "Toth",
        "Ulrich", "Varga", "Weiss", "Young")
ROLES = ("investor relations", "treasury", "credit officer")
START, END = dt.date(2019, 1, 1), dt.date(2024, 12, 31)


_ALNUM = string.digits + string.ascii_uppercase
_DIGITS = {c: str(int(c, 36)) for c in _ALNUM + string.ascii_lowercase}  # a character's number
_LUHN = ({str(d): d for d in range(10)},  # a digit's share of the sum, even places doubled
         {str(d): 2 * d // 10 + 2 * d % 10 for d in range(10)})


def lei_check(base18: str) -> str:
    """ISO 17442 check digits (ISO 7064 MOD 97-10) for an 18-character LEI prefix."""
    digits = "".join([_DIGITS[c] for c in base18 + "00"])
    return f"{98 - int(digits) % 97:02d}"


def isin_check(base11: str) -> str:
    """The Luhn check digit of an ISIN's first 11 characters."""
    digits = "".join([_DIGITS[c] for c in base11])
    total = sum(_LUHN[i % 2 == 0][d] for i, d in enumerate(reversed(digits)))
    return str((10 - total % 10) % 10)


def _chars(source: str | random.Random, n: int) -> str:
    if isinstance(source, Draws):
        return source.string(_ALNUM, n)
    if isinstance(source, random.Random):
        choice = source.choice
        return "".join([choice(_ALNUM) for _ in range(n)])
    digest = hashlib.sha256(source.encode()).digest()
    return "".join(_ALNUM[b % 36] for b in digest[:n])


def make_lei(source: str | random.Random) -> str:
    base = "9845" + "00" + _chars(source, 12)
    return base + lei_check(base)


def make_isin(source: str | random.Random) -> str:
    base = "XS" + _chars(source, 9)
    return base + isin_check(base)


def slug(name: str) -> str:
    return "".join(c for c in name.lower().split(" ")[0] if c.isalnum())


class World:
    """Rows under construction, with the bookkeeping that keeps them consistent."""

    def __init__(self, rng: random.Random, width: int = 5) -> None:
        self.rng = rng
        self.width = width  # digits of an issuer id: wider when the variant outgrows 5
        self.issuers: list[Row] = []
        self.instruments: list[Row] = []
        self.actions: list[Row] = []
        self.links: list[Row] = []
        self.contacts: list[Row] = []
        self.countries: dict[str, Row] = {}
        self._ids: set[str] = set()
        self._dates: dict[str, set[dt.date]] = {}   # per LEI (or ISIN): action dates in use
        self.lei_of: dict[str, str] = {}
        self.names: set[str] = set()

    def new_id(self, prefix: str, width: int) -> str:
        while True:
            value = f"{prefix}-{self.rng.randrange(10 ** (width - 1), 10 ** width)}"
            if value not in self._ids:
                self._ids.add(value)
                return value

    def date(self, a: dt.date, b: dt.date) -> dt.date:
        return a + dt.timedelta(days=self.rng.randrange((b - a).days + 1))

    def issuer(self, name: str, country: str, sector: str, *, lei: str | None = None,
               source: str = "core") -> str:
        issuer_id = self.new_id("ISS", self.width)
        lei = lei or make_lei(self.rng)
        self.issuers.append({"issuer_id": issuer_id, "lei": lei, "legal_name": name,
                             "country_code": country, "sector": sector,
                             "source_system": source})
        self.lei_of[issuer_id] = lei
        self.names.add(name)
        return issuer_id

    def action(self, issuer_or_isin: str, when: dt.date, kind: str, rating: str | None, *,
               entity_type: str = "issuer", outlook: str | None = None) -> dt.date:
        owner = self.lei_of.get(issuer_or_isin, issuer_or_isin)
        used = self._dates.setdefault(owner, set())
        while when in used:  # one action per entity per day: the rating on a date is defined
            when += dt.timedelta(days=1)
        used.add(when)
        drawn = self.rng.choices(("stable", "positive", "negative"), (6, 1.5, 2.5))[0]
        outlook = None if kind == "withdraw" else (outlook or drawn)
        self.actions.append({"action_id": None, "entity_type": entity_type,
                             "entity_id": issuer_or_isin, "action_date": when,
                             "action_type": kind, "rating": rating, "outlook": outlook})
        return when

    def instrument(self, issuer_id: str, kind: str, currency: str, *, isin: str | None = None,
                   issued: dt.date | None = None, amount: float | None = None) -> str:
        isin = isin or make_isin(self.rng)
        issued = issued or self.date(dt.date(2014, 1, 1), dt.date(2024, 6, 30))
        years = self.rng.randrange(3, 13)
        self.instruments.append({
            "isin": isin, "issuer_id": issuer_id, "instrument_type": kind, "currency": currency,
            "issue_date": issued, "maturity_date": issued.replace(year=issued.year + years)
            if not (issued.month == 2 and issued.day == 29) else dt.date(issued.year + years, 3, 1),
            "amount_mn": amount if amount is not None else float(self.rng.randrange(2, 61) * 25)})
        return isin

    def link(self, parent_id: str, child_id: str, share: float) -> None:
        self.links.append({"link_id": None, "parent_id": parent_id, "child_id": child_id,
                           "share": float(share),
                           "effective_date": self.date(dt.date(2010, 1, 1), dt.date(2018, 12, 31))})

    def contact(self, issuer_id: str, company: str, country: str, *, name: str | None = None,
                role: str | None = None, email: str | None = None,
                phone: str | None = None) -> None:
        name = name or f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}"
        first, last = name.lower().split(" ", 1)
        self.contacts.append({
            "contact_id": None, "issuer_id": issuer_id, "name": name,
            "role": role or self.rng.choice(ROLES),
            "email": email or f"{first}.{last.replace(' ', '')}@{slug(company)}.example",
            "phone": phone or f"{PHONE_CODES[country]} 555 {self.rng.randrange(1000, 9999)}"})

    def history(self, records: list[str], start_rank: int, first: dt.date, steps: int, *,
                withdraw: bool = False) -> None:
        """A random rating history spread over an issuer's records."""
        rank = start_rank
        when = self.action(records[0], first, "assign", SCALE[rank])
        for _ in range(steps):
            when = when + dt.timedelta(days=self.rng.randrange(90, 420))
            if when > dt.date(2024, 12, 20):
                return
            kind = self.rng.choices(("affirm", "upgrade", "downgrade"), (3, 3, 4))[0]
            move = self.rng.choice((1, 1, 2))
            if kind == "upgrade" and rank - move >= 1:
                rank -= move
            elif kind == "downgrade" and rank + move <= 17:
                rank += move
            else:
                kind = "affirm"
            when = self.action(self.rng.choice(records), when, kind, SCALE[rank])
        if withdraw:
            when = when + dt.timedelta(days=self.rng.randrange(60, 300))
            if when <= dt.date(2024, 12, 20):
                self.action(self.rng.choice(records), when, "withdraw", None)


def generate(*, variant: str, seed: int, issuers: int = 40, chains: int = 0,
             **_: Any) -> dict[str, list[Row]]:
    """Every table of one variant. `issuers` counts legal entities outside the sandbox (deep
    ownership chains come on top); `chains` adds that many chains 8 to 11 links deep, and the
    named chain of Spire, 10 links deep."""
    rng = Draws(f"credit/{seed}")  # random.Random's draws, faster
    w = World(rng, width=max(5, len(str(issuers * 10))))  # ids fill a tenth of their space
    for code, name, (lo, hi), (ulo, uhi) in COUNTRIES:
        w.countries[code] = {"country_code": code, "name": name,
                             "sovereign_rating": SCALE[rng.randint(lo, hi)],
                             "ceiling_uplift": rng.randint(ulo, uhi)}

    def ceiling_rank(code: str) -> int:
        row = w.countries[code]
        return max(RANK[row["sovereign_rating"]] - row["ceiling_uplift"], 0)

    cast = plant_cast(w, ceiling_rank)
    fill(w, issuers - cast, rng)
    if chains:
        plant_chains(w, chains, rng)
    return finish(w)


def plant_chains(w: World, count: int, rng: random.Random) -> None:
    """Deep ownership chains: Spire's, all majority links 10 deep with a minority stake and an
    exactly-50% stake beside it; then `count` random chains 8 to 11 deep, some broken in the
    middle by a minority or a 50% link."""
    d = dt.date

    def entity(name: str, country: str) -> str:
        sector = rng.choice(SECTORS)
        ids = w.issuer(name, country, sector, lei=make_lei(name))
        w.contact(ids, name, country)
        w.history([ids], rng.randint(3, 12), w.date(START, d(2021, 12, 31)), rng.randint(1, 3))
        return ids

    spire = [entity("Spire Holdings AG", "XA")]
    spire += [entity(f"Spire Tier {k} Ltd", rng.choice(("XA", "XB", "XC"))) for k in range(1, 11)]
    for parent, child in zip(spire, spire[1:]):
        w.link(parent, child, rng.randint(51, 100))
    outsider = entity("Osprey Minority Partners NV", "XB")
    w.link(outsider, spire[3], rng.randint(10, 40))
    half = entity("Halvard Equal Holdings SA", "XE")
    w.link(half, spire[0], 50)
    for c in range(count):
        depth = rng.randint(8, 11)
        letter = string.ascii_uppercase[c % 26] + (str(c // 26) if c >= 26 else "")
        root = rng.choice(ROOTS)
        names = [f"{root} Chain {letter} Level {k} Ltd" for k in range(depth + 1)]
        ids = [entity(n, rng.choice(list(w.countries))) for n in names]
        broken = rng.randrange(1, depth) if rng.random() < 0.4 else None
        for k, (parent, child) in enumerate(zip(ids, ids[1:]), 1):
            share = rng.choice((30, 50)) if k == broken else rng.randint(51, 100)
            w.link(parent, child, share)


def plant_cast(w: World, ceiling_rank: Any) -> int:
    """The issuers the questions name, each planting a trap; returns how many LEIs it made."""
    rng = w.rng
    d = dt.date
    n = 0

    def cast(name: str, country: str, sector: str, *, twin: str | None = None,
             contact: bool = True) -> list[str]:
        nonlocal n
        n += 1
        lei = make_lei(name)
        ids = [w.issuer(name, country, sector, lei=lei)]
        if twin:
            ids.append(w.issuer(twin, country, sector, lei=lei, source="legacy"))
        if contact:
            w.contact(ids[0], name, country)
        return ids

    # time: the latest action overall is not the rating on 2023-06-30
    orvane = cast("Orvane Utilities AG", "XC", "Utilities")[0]
    r0 = rng.randint(3, 7)
    w.action(orvane, w.date(d(2019, 2, 1), d(2020, 6, 30)), "assign", SCALE[r0])
    w.action(orvane, w.date(d(2021, 1, 1), d(2023, 3, 31)), "upgrade", SCALE[r0 - 1])
    w.action(orvane, w.date(d(2023, 7, 15), d(2024, 3, 31)), "downgrade", SCALE[r0 + 1])
    w.action(orvane, w.date(d(2024, 5, 1), d(2024, 11, 30)), "affirm", SCALE[r0 + 1])
    w.instrument(orvane, "senior_unsecured", "EUR", isin=make_isin("Orvane senior 1"))
    w.instrument(orvane, "subordinated", "EUR", isin=make_isin("Orvane subordinated 1"))
    w.instrument(orvane, "senior_unsecured", "USD")

    # time: a withdrawal ends the rating
    kestrel = cast("Kestrel Shipping Ltd", "XD", "Industrials")[0]
    k0 = rng.randint(9, 11)
    w.action(kestrel, w.date(d(2019, 3, 1), d(2020, 3, 1)), "assign", SCALE[k0])
    w.action(kestrel, w.date(d(2021, 1, 1), d(2022, 12, 31)), "upgrade", SCALE[k0 - 1])
    w.action(kestrel, w.date(d(2024, 1, 10), d(2024, 5, 31)), "withdraw", None)
    w.instrument(kestrel, "senior_unsecured", "USD")

    # time: withdrawn, then rated again later
    tern = cast("Tern Logistics Oy", "XB", "Industrials")[0]
    t0 = rng.randint(7, 9)
    w.action(tern, w.date(d(2019, 3, 1), d(2020, 3, 1)), "assign", SCALE[t0])
    w.action(tern, w.date(d(2022, 3, 1), d(2022, 9, 30)), "withdraw", None)
    w.action(tern, w.date(d(2023, 10, 1), d(2024, 3, 31)), "assign", SCALE[t0 + 1])

    # identity: the latest action sits on the legacy record, spelt differently
    norvik = cast("Norvik Holdings plc", "XB", "Industrials", twin="NORVIK HOLDINGS PLC.",
                  contact=False)
    w.contact(norvik[0], "Norvik Holdings plc", "XB", name="Ingrid Solberg",
              role="investor relations", email="ingrid.solberg@norvik-holdings.example",
              phone="+882 555 0142")
    v0 = rng.randint(3, 6)
    w.action(norvik[0], w.date(d(2019, 1, 15), d(2019, 12, 31)), "assign", SCALE[v0])
    w.action(norvik[0], w.date(d(2021, 1, 1), d(2022, 6, 30)), "affirm", SCALE[v0])
    w.action(norvik[1], w.date(d(2023, 1, 15), d(2024, 9, 30)), "downgrade", SCALE[v0 + 1])
    w.instrument(norvik[1], "senior_unsecured", "GBP")
    lumen = cast("Lumen Grid Utilities SA", "XH", "Utilities", twin="Lumen Grid Utils S.A.")
    w.history(lumen, rng.randint(4, 9), w.date(d(2019, 1, 1), d(2020, 6, 30)), 3)
    w.instrument(lumen[1], "covered_bond", "EUR")

    # fallen angels and the downgrades that are not
    pellucid = cast("Pellucid Mining Corp", "XE", "Materials")[0]
    w.action(pellucid, w.date(d(2019, 5, 1), d(2020, 12, 31)), "assign", SCALE[rng.randint(7, 8)])
    w.action(pellucid, w.date(d(2021, 6, 1), d(2022, 10, 31)), "downgrade", SCALE[9])
    w.action(pellucid, w.date(d(2023, 2, 1), d(2023, 11, 30)), "downgrade", SCALE[10])
    quarry = cast("Quarry Cement plc", "XC", "Materials")[0]
    w.action(quarry, w.date(d(2019, 5, 1), d(2021, 12, 31)), "assign", SCALE[7])
    w.action(quarry, w.date(d(2023, 2, 1), d(2023, 11, 30)), "downgrade", SCALE[8])
    rook = cast("Rook Chemicals NV", "XH", "Materials")[0]
    w.action(rook, w.date(d(2019, 5, 1), d(2021, 12, 31)), "assign", SCALE[11])
    w.action(rook, w.date(d(2023, 2, 1), d(2023, 11, 30)), "downgrade", SCALE[12])

    # rating periods: a dip inside 2023, and a first rating in mid-2023
    tamsin = cast("Tamsin Foods AB", "XE", "Consumer")[0]
    w.action(tamsin, w.date(d(2019, 6, 1), d(2020, 12, 31)), "assign", SCALE[8])
    w.action(tamsin, w.date(d(2023, 3, 1), d(2023, 5, 31)), "downgrade", SCALE[10])
    w.action(tamsin, w.date(d(2023, 8, 1), d(2023, 10, 31)), "upgrade", SCALE[9])
    ulmus = cast("Ulmus Telecom Oy", "XA", "Telecoms")[0]
    w.action(ulmus, w.date(d(2023, 5, 1), d(2023, 8, 31)), "assign", SCALE[rng.randint(5, 8)])

    # outlook: a negative outlook signals a possible downgrade; it is not one
    wren = cast("Wren Textiles plc", "XC", "Consumer")[0]
    w.action(wren, w.date(d(2019, 6, 1), d(2020, 12, 31)), "assign", SCALE[rng.randint(5, 8)],
             outlook="stable")
    w_rank = RANK[w.actions[-1]["rating"]]
    w.action(wren, w.date(d(2023, 1, 10), d(2023, 5, 31)), "affirm", SCALE[w_rank],
             outlook="negative")
    w.action(wren, w.date(d(2024, 8, 1), d(2024, 11, 30)), "affirm", SCALE[w_rank],
             outlook="stable")
    vireo = cast("Vireo Packaging AG", "XE", "Materials")[0]
    v_rank = rng.randint(5, 9)
    w.action(vireo, w.date(d(2019, 6, 1), d(2020, 12, 31)), "assign", SCALE[v_rank],
             outlook="stable")
    w.action(vireo, w.date(d(2023, 1, 10), d(2023, 5, 31)), "affirm", SCALE[v_rank],
             outlook="negative")
    w.action(vireo, w.date(d(2023, 9, 1), d(2024, 5, 31)), "downgrade", SCALE[v_rank + 1],
             outlook="stable")

    # ceilings: above the ceiling, and above the sovereign but within the uplift
    feroe = cast("Feroe Power Company", "XF", "Utilities")[0]
    fc = ceiling_rank("XF")
    w.action(feroe, w.date(d(2019, 4, 1), d(2021, 12, 31)), "assign",
             SCALE[fc - rng.randint(1, 3)])
    cb = w.instrument(feroe, "covered_bond", "EUR", isin=make_isin("Feroe covered 1"),
                      issued=w.date(d(2020, 1, 1), d(2022, 12, 31)))
    w.action(cb, w.date(d(2023, 1, 1), d(2023, 12, 31)), "assign",
             SCALE[fc - rng.randint(3, 5)], entity_type="instrument")
    galdor = cast("Galdor Telecom SA", "XG", "Telecoms")[0]
    w.action(galdor, w.date(d(2019, 4, 1), d(2021, 12, 31)), "assign",
             SCALE[ceiling_rank("XG") - rng.randint(1, 2)])
    halcyon = cast("Halcyon Airways SpA", "XD", "Industrials")[0]
    sov_d = RANK[w.countries["XD"]["sovereign_rating"]]
    w.action(halcyon, w.date(d(2019, 4, 1), d(2021, 12, 31)), "assign", SCALE[sov_d - 1])

    # groups: a majority chain through a twin record, a minority holder above it
    ag = cast("Atrium Group SE", "XA", "Industrials")[0]
    af = cast("Atrium Finance BV", "XA", "Industrials")[0]
    al = cast("Atrium Leasing GmbH", "XA", "Industrials", twin="Atrium Leasing G.m.b.H.")
    afl = cast("Atrium Fleet Services Ltd", "XA", "Industrials")[0]
    vantor = cast("Vantor Capital AG", "XB", "Industrials")[0]
    w.link(ag, af, rng.randint(51, 90))
    w.link(af, al[1], rng.randint(51, 80))   # through the legacy record
    w.link(al[0], afl, rng.randint(60, 100))
    w.link(vantor, ag, rng.randint(20, 40))  # with the test record's stake, at most 100%
    for ids in ([ag], [af], al, [afl], [vantor]):
        w.history(ids, rng.randint(3, 12), w.date(d(2019, 1, 1), d(2020, 12, 31)), 2)
    # exactly 50% is not control
    borealis = cast("Borealis Partners NV", "XB", "Industrials")[0]
    cobalt = cast("Cobalt Logistics AG", "XC", "Industrials")[0]
    delphine = cast("Delphine Ports SA", "XE", "Industrials")[0]
    w.link(borealis, cobalt, 50)
    w.link(delphine, cobalt, 50)
    w.instrument(delphine, "covered_bond", "USD")
    w.action(w.instruments[-1]["isin"], d(2021, 3, 3), "assign", SCALE[2],
             entity_type="instrument")
    # stakes are not summed across a group: 45% + 20% through a subsidiary is not control
    meridian = cast("Meridian Holdings plc", "XH", "Industrials")[0]
    mri = cast("Meridian Retail Invest Ltd", "XH", "Consumer")[0]
    sable = cast("Sable Retail AB", "XH", "Consumer")[0]
    w.link(meridian, mri, rng.randint(60, 90))
    w.link(mri, sable, 20)
    w.link(meridian, sable, 45)
    for ids in ([borealis], [cobalt], [delphine], [meridian], [mri], [sable]):
        w.history(ids, rng.randint(3, 12), w.date(d(2019, 1, 1), d(2020, 12, 31)), 2)
    for ids in ([feroe], [galdor], [halcyon], [pellucid], [quarry], [rook], [tamsin], [ulmus],
                [kestrel], norvik, [ag], [af], al, [afl], [vantor], [borealis], [cobalt],
                [meridian], [mri], [sable]):
        if rng.random() < 0.7:
            w.instrument(ids[0], rng.choice(("senior_unsecured", "subordinated")),
                         rng.choice(("EUR", "USD", "GBP")))

    # test records: plausible names, real-looking data, excluded by definition
    sandbox = (("Harbour Test Bank", "XA"), ("Veritas Savings Bank", "XB"),
               ("Oakmere Building Society", "XD"), ("Sandbox Capital Markets", "XA"))
    for i, (name, country) in enumerate(sandbox):
        sid = w.issuer(name, country, "Financials", lei=make_lei(name), source="sandbox")
        w.contact(sid, name, country)
        w.instrument(sid, "senior_unsecured", "EUR", amount=float(rng.randrange(8, 41) * 25))
        w.instrument(sid, "covered_bond", "EUR")
        if i == 0:  # a fallen angel in 2023 that is not one
            w.action(sid, d(2020, 2, 3), "assign", SCALE[9])
            w.action(sid, w.date(d(2023, 2, 1), d(2023, 11, 30)), "downgrade", SCALE[11])
        else:
            w.history([sid], rng.randint(2, 9), w.date(d(2019, 1, 1), d(2021, 12, 31)), 2)
        if i == 2:  # a test record holding a majority of a real group
            w.link(sid, ag, rng.randint(55, 60))
    return n


def fill(w: World, count: int, rng: random.Random) -> None:
    """Random issuers around the cast: histories, twins, instruments, small groups."""
    clean = [c for c in w.countries if c not in ("XF", "XG")]
    made: list[list[str]] = []
    for i in range(max(count, 0)):
        sector = rng.choice(SECTORS)
        country = rng.choice(clean if rng.random() < 0.8 else list(w.countries))
        tries = 0
        while True:
            name = f"{rng.choice(ROOTS)} {rng.choice(NOUNS[sector])} {rng.choice(SUFFIXES)}"
            tries += 1
            if tries > 8:  # the names of a sector run out past ~10,000 issuers: number them
                root, rest = name.split(" ", 1)
                name = f"{root} {rng.randrange(2, 10 ** 6)} {rest}"
            if name not in w.names:
                break
        twin = None
        if i % 8 == 3:  # every eighth issuer has a second record in the legacy system
            twin = name.upper().replace(" ", "  ", 1) if i % 16 == 3 else \
                name.replace(" plc", " P.L.C.").replace(" Ltd", " Limited").replace(
                    " Corp", " Corporation") + ("" if rng.random() < 0.5 else ".")
            if twin == name:
                twin = name + " (legacy)"
        ids = [w.issuer(name, country, sector)]
        lei = w.lei_of[ids[0]]
        if twin:
            ids.append(w.issuer(twin, country, sector, lei=lei, source="legacy"))
        w.contact(ids[0], name, country)
        w.history(ids, rng.randint(2, 14), w.date(START, dt.date(2021, 12, 31)),
                  rng.randint(1, 5), withdraw=rng.random() < 0.1)
        for _ in range(rng.randint(1, 3)):
            kind = rng.choices(("senior_unsecured", "subordinated", "covered_bond"),
                               (6, 2.5, 1.5))[0]
            isin = w.instrument(rng.choice(ids), kind, rng.choices(
                ("EUR", "USD", "GBP", "CHF"), (5, 3, 1, 1))[0])
            if kind == "covered_bond" or rng.random() < 0.3:
                inst = w.instruments[-1]
                when = max(inst["issue_date"], START)
                if when <= END:
                    w.action(isin, when, "assign", SCALE[rng.randint(0, 6)],
                             entity_type="instrument")
        made.append(ids)
    # small groups among the filler: majority, minority and exactly-50% links, no cycles
    held: set[str] = set()
    for i in range(1, len(made)):
        if rng.random() < 0.35:
            parent = made[rng.randrange(0, i)]
            child = made[i]
            share = rng.choice((15, 30, 50, 51, 60, 75, 100))
            if child[0] in held and share > 50:
                continue
            w.link(rng.choice(parent), rng.choice(child), share)
            if share > 50:
                held.add(child[0])


def finish(w: World) -> dict[str, list[Row]]:
    """Number the rows and order every table by its key."""
    actions = sorted(w.actions, key=lambda a: (a["action_date"], a["entity_id"]))
    for i, a in enumerate(actions, 1):
        a["action_id"] = f"RA-{i:05d}"
    links = sorted(w.links, key=lambda r: (r["effective_date"], r["parent_id"], r["child_id"]))
    for i, r in enumerate(links, 1):
        r["link_id"] = f"OWN-{i:04d}"
    contacts = sorted(w.contacts, key=lambda r: (r["issuer_id"], r["name"]))
    for i, r in enumerate(contacts, 1):
        r["contact_id"] = f"CT-{i:04d}"
    return {
        "countries": [w.countries[c] for c in sorted(w.countries)],
        "issuers": sorted(w.issuers, key=lambda r: r["issuer_id"]),
        "instruments": sorted(w.instruments, key=lambda r: r["isin"]),
        "rating_actions": actions,
        "ownership": links,
        "contacts": contacts,
    }
