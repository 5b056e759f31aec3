"""The research generator: invented works, authors, institutions, authorships, citations and
author emails, shaped like OpenAlex, with every trap of the domain planted several times.

Deterministic: the same (variant, seed) gives the same rows, in the same order, so the built
files are byte-identical. The *cast* — the works, author records and institutions the questions
name — keeps its titles, ids and ORCIDs at every seed; the seed moves its years (within bounds),
its co-authors and how many works cite it, and fills the world around it with random works by
random authors at random institutions. Every cast co-author is drawn under constraints that keep
each trap biting (the seed-property test checks it).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_kgbench.packs import Draws

Row = dict[str, Any]

FIRST_YEAR, LAST_YEAR = 2018, 2024
FIRST = ("Ada", "Bruno", "Chiara", "Daniel", "Elena", "Farah", "Gustav", "Hanna", "Ivo", "Julia",
         "Kenji", "Laila", "Marco", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Stefan",
         "Tamar", "Ulrich", "Vivian", "Wen", "Yusuf", "Zofia", "Amir", "Beatrix", "Carlos")
LAST = ("Abbott", "Bergstrom", "Chen", "Delacroix", "Eriksen", "Fischer", "Gallo", "Horvat",
        "Ibarra", "Jansen", "Kowalski", "Lopes", "Moretti", "Nakamura", "Osei", "Pereira",
        "Quinlan", "Rahman", "Schulz", "Tanaka", "Ueda", "Vasquez", "Whitfield", "Yilmaz",
        "Zhang", "Achterberg", "Brennan", "Costa")
# filler institutions: (name, country, faculties as (name, departments))
UNIVERSITIES = (
    ("Eastfold University", "GB"), ("University of Korvan", "FI"), ("Lussac University", "FR"),
    ("Vinterberg University", "SE"), ("Marlow Institute of Science", "US"),
    ("University of Tessaly", "GR"), ("Oberhain University", "DE"), ("Kilbride University", "IE"),
    ("Sorensby University", "DK"), ("University of Paloma", "ES"), ("Hatsuyama University", "JP"),
    ("Ridgemont University", "CA"), ("University of Velden", "AT"), ("Amstell University", "BE"),
)
FACULTIES = {
    "Science": ("Mathematics", "Biology", "Geology", "Astronomy"),
    "Engineering": ("Mechanical Engineering", "Electrical Engineering", "Civil Engineering"),
    "Medicine": ("Oncology", "Neurology", "Public Health"),
    "Social Sciences": ("Economics", "Sociology", "Psychology"),
}
COMPANIES = (("Quillon Biotech Ltd", "GB"), ("Stavanger Subsea AS", "NO"),
             ("Meridia Pharma SA", "CH"), ("Tallis Computing Inc", "US"))
HOSPITALS = (("St Aldric Hospital", "GB"), ("Kessel University Hospital", "NL"),
             ("Hopital Vauclair", "FR"))
ADJ = ("Scalable", "Robust", "Adaptive", "Sparse", "Multiscale", "Longitudinal", "Bayesian",
       "Stochastic", "Low-cost", "High-resolution", "Distributed", "Quantitative")
NOUN = ("inference", "imaging", "modelling", "estimation", "control", "screening", "synthesis",
        "spectroscopy", "simulation", "forecasting", "segmentation", "calibration")
TOPIC = ("coastal sediment transport", "graphene membranes", "sepsis biomarkers",
         "urban heat islands", "soil microbiomes", "wind turbine wakes", "protein folding",
         "labour market frictions", "glacier retreat", "battery degradation", "migraine cohorts",
         "medieval trade routes", "exoplanet atmospheres", "river deltas", "sleep apnoea",
         "ionic liquids", "household savings", "seismic hazard", "coral bleaching",
         "language acquisition", "antibiotic resistance", "solar cell stability")
KINDS = ("article", "review", "preprint", "dataset")


def _digits(source: str | random.Random, n: int) -> str:
    if isinstance(source, random.Random):
        return "".join(str(source.randrange(10)) for _ in range(n))
    digest = hashlib.sha256(source.encode()).digest()
    return "".join(str(b % 10) for b in digest[:n])


def _digit_sum(value: str) -> int:
    return sum(int(c) for c in value if c.isdigit())


def cast_id(prefix: str, width: int, label: str) -> str:
    """The fixed id of a cast record: a hash of its label whose digit sum is divisible by 7."""
    salt = 0
    while True:
        value = prefix + _digits(f"research/{prefix}/{label}/{salt}", width)
        if value[1] in "23456789" and _digit_sum(value) % 7 == 0:
            return value
        salt += 1


def orcid_check(base15: str) -> str:
    """The ISO 7064 MOD 11-2 check character of an ORCID's first 15 digits."""
    total = 0
    for ch in base15:
        total = (total + int(ch)) * 2
    result = (12 - total % 11) % 11
    return "X" if result == 10 else str(result)


def make_orcid(source: str | random.Random) -> str:
    block = str(1 + int(_digits(source + "/block", 1)) % 3) if isinstance(source, str) \
        else str(source.randint(1, 3))
    base = "0000000" + block + _digits(source, 7)
    full = base + orcid_check(base)
    return "-".join(full[i:i + 4] for i in range(0, 16, 4))


def slug(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalnum())


_GENERIC = {"university", "of", "institute", "technology", "science", "the", "gmbh", "as", "ltd",
            "inc", "sa", "st", "hospital", "hopital"}


def _domain(institution: str) -> str:
    """The mail domain of an institution: its first distinctive word."""
    words = [slug(w) for w in institution.split()]
    return next((w for w in words if w and w not in _GENERIC), words[0])


@dataclass
class Person:
    """A person of the generator's world: one or more author records, one home institution."""

    key: str
    name: str
    home: str
    records: list[str] = field(default_factory=list)


class World:
    """Rows under construction, with the bookkeeping that keeps them consistent."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.works: list[Row] = []
        self.authors: list[Row] = []
        self.institutions: list[Row] = []
        self.authorships: list[Row] = []
        self.citations: set[tuple[str, str]] = set()
        self.emails: dict[str, str] = {}
        self._ids: set[str] = set()
        self.inst: dict[str, Row] = {}
        self.person_of: dict[str, str] = {}      # author_id -> person key
        self.persons: dict[str, Person] = {}
        self.pool: list[Person] = []             # filler persons: co-authors of every work
        self.work_persons: dict[str, set[str]] = {}
        self.work_row: dict[str, Row] = {}
        self.group_of: dict[str, str] = {}       # work_id -> its version group (published id)
        self.closed: set[str] = set()            # cast institutions filler authors never join
        self.home: dict[str, str] = {}           # author_id -> the institution it lists

    # --- identifiers ---------------------------------------------------------------------------

    def new_id(self, prefix: str, width: int, label: str | None = None) -> str:
        """A fresh id. A cast id (with `label`) is a hash of the label, the same at every seed;
        cast ids have a digit sum divisible by 7 and random ids never do, so they cannot meet."""
        if label is not None:
            value = cast_id(prefix, width, label)
            if value in self._ids:
                raise ValueError(f"cast id collision: {label}")
            self._ids.add(value)
            return value
        while True:
            value = prefix + str(self.rng.randint(2, 9)) + _digits(self.rng, width - 1)
            if _digit_sum(value) % 7 and value not in self._ids:
                self._ids.add(value)
                return value

    # --- institutions ------------------------------------------------------------------------

    def institution(self, name: str, country: str, kind: str, parent: str | None = None, *,
                    label: str | None = None) -> str:
        inst_id = self.new_id("I", 9, label)
        row = {"institution_id": inst_id, "display_name": name, "country_code": country,
               "institution_type": kind, "parent_id": parent}
        self.institutions.append(row)
        self.inst[inst_id] = row
        return inst_id

    def subtree(self, top: str) -> set[str]:
        """`top` and every institution below it."""
        out = {top}
        grew = True
        while grew:
            grew = False
            for row in self.institutions:
                if row["parent_id"] in out and row["institution_id"] not in out:
                    out.add(row["institution_id"])
                    grew = True
        return out

    def top_of(self, inst_id: str) -> Row:
        row = self.inst[inst_id]
        while row["parent_id"]:
            row = self.inst[row["parent_id"]]
        return row

    # --- authors -------------------------------------------------------------------------------

    def author(self, name: str, home: str, *, orcid: str | None = None, label: str | None = None,
               email: str | None = None) -> str:
        author_id = self.new_id("A", 10, label)
        self.authors.append({"author_id": author_id, "display_name": name, "orcid": orcid})
        self.home[author_id] = home
        key = orcid or author_id
        self.person_of[author_id] = key
        person = self.persons.setdefault(key, Person(key, name, home))
        person.records.append(author_id)
        if email is None and self.rng.random() < 0.85:
            first, *rest = name.lower().replace(".", "").split(" ")
            domain = _domain(self.top_of(home)["display_name"])
            email = f"{first}.{slug(''.join(rest))}@{domain}.example"
            while email in self.emails.values():
                email = email.replace("@", str(self.rng.randrange(10)) + "@", 1)
        if email:
            self.emails[author_id] = email
        return author_id

    def pick(self, count: int, *, exclude_persons: Iterable[str] = (),
             exclude_insts: Iterable[str] = ()) -> list[tuple[str, list[str]]]:
        """`count` distinct filler persons as (author record, [home]) for a cast work."""
        persons, insts = set(exclude_persons), set(exclude_insts)
        options = [p for p in self.pool if p.key not in persons and p.home not in insts]
        chosen = self.rng.sample(options, min(count, len(options)))
        return [(self.rng.choice(p.records), [p.home]) for p in chosen]

    # --- works ---------------------------------------------------------------------------------

    def work(self, title: str, year: int, kind: str, authors: list[tuple[str, list[str]]], *,
             label: str | None = None, retracted: bool = False, published: str | None = None,
             corresponding: int = 0) -> str:
        """One work record with its authorship rows (one per author and institution)."""
        work_id = self.new_id("W", 10, label)
        doi_kind = "preprint" if kind == "preprint" else ("data" if kind == "dataset" else "rs")
        row = {"work_id": work_id, "doi": f"10.5555/{doi_kind}.{year}.{work_id[-6:]}",
               "title": title, "publication_year": year, "work_type": kind,
               "is_retracted": retracted, "published_version_id": published}
        self.works.append(row)
        self.work_row[work_id] = row
        self.group_of[work_id] = published or work_id
        n = len(authors)
        for i, (author_id, insts) in enumerate(authors):
            position = "first" if i == 0 else ("last" if i == n - 1 else "middle")
            for inst_id in insts:
                self.authorships.append({
                    "work_id": work_id, "author_id": author_id, "author_position": position,
                    "institution_id": inst_id, "is_corresponding": i == corresponding,
                    "_order": i})
        self.work_persons[work_id] = {self.person_of[a] for a, _ in authors}
        return work_id

    def cite(self, citing: str, cited: str) -> None:
        if self.group_of[citing] == self.group_of[cited]:
            raise ValueError("a work never cites its own version")
        self.citations.add((citing, cited))

    def title(self) -> str:
        rng = self.rng
        return f"{rng.choice(ADJ)} {rng.choice(NOUN)} of {rng.choice(TOPIC)}"


def generate(*, variant: str, seed: int, works: int = 120, **_: Any) -> dict[str, list[Row]]:
    """Every table of one variant; `works` is the number of work records."""
    rng = Draws(f"research/{seed}")  # random.Random's draws, faster
    w = World(rng)
    cast = cast_institutions(w)
    filler_institutions(w, works)
    make_pool(w, works)
    plant_cast(w, cast)
    plant_versions(w, cast)
    fill(w, works - len(w.works))
    return finish(w)


# --- the cast ------------------------------------------------------------------------------------

def cast_institutions(w: World) -> dict[str, str]:
    """The institutions the questions name: three universities (up to four levels), two
    companies. Their ids are fixed at every seed."""
    c: dict[str, str] = {}

    def inst(label: str, name: str, country: str, kind: str, parent: str | None = None) -> None:
        c[label] = w.institution(name, country, kind, c[parent] if parent else None, label=label)

    inst("ald", "University of Aldermoor", "GB", "university")
    inst("ald_sci", "Faculty of Science, University of Aldermoor", "GB", "faculty", "ald")
    inst("ald_phy", "Department of Physics, University of Aldermoor", "GB", "department", "ald_sci")
    inst("ald_qo", "Quantum Optics Group, University of Aldermoor", "GB", "group", "ald_phy")
    inst("ald_chem", "Department of Chemistry, University of Aldermoor", "GB", "department",
         "ald_sci")
    inst("ald_med", "Faculty of Medicine, University of Aldermoor", "GB", "faculty", "ald")
    inst("ald_card", "Department of Cardiology, University of Aldermoor", "GB", "department",
         "ald_med")
    inst("brk", "Brackwater University", "NL", "university")
    inst("brk_eng", "Faculty of Engineering, Brackwater University", "NL", "faculty", "brk")
    inst("brk_cs", "Department of Computer Science, Brackwater University", "NL", "department",
         "brk_eng")
    inst("brk_rob", "Robotics Lab, Brackwater University", "NL", "group", "brk_cs")
    inst("brk_hum", "Faculty of Humanities, Brackwater University", "NL", "faculty", "brk")
    inst("brk_hist", "Department of History, Brackwater University", "NL", "department", "brk_hum")
    inst("cor", "Corran Institute of Technology", "IE", "university")
    inst("cor_mat", "School of Materials, Corran Institute of Technology", "IE", "department",
         "cor")
    inst("helix", "Helix Analytics GmbH", "DE", "company")
    inst("norland", "Norland Instruments AS", "NO", "company")
    w.closed = {c["helix"], c["ald_qo"], c["brk_rob"]}
    return c


def filler_institutions(w: World, works: int) -> None:
    """Random universities with faculties and departments (sometimes departments straight under
    the university), a few extra departments in the cast universities, companies, hospitals."""
    rng = w.rng
    n_univ = min(3 + works // 120, len(UNIVERSITIES))
    for name, country in rng.sample(UNIVERSITIES, n_univ):
        uni = w.institution(name, country, "university")
        faculties = rng.sample(sorted(FACULTIES), rng.randint(1, 3))
        flat = rng.random() < 0.3
        for fac in faculties:
            parent = uni if flat else w.institution(f"Faculty of {fac}, {name}", country,
                                                    "faculty", uni)
            for dept in rng.sample(FACULTIES[fac], rng.randint(1, 2)):
                w.institution(f"Department of {dept}, {name}", country, "department", parent)
    by_name = {r["display_name"]: r["institution_id"] for r in w.institutions}
    for fac, uni in (("Faculty of Science", "University of Aldermoor"),
                     ("Faculty of Engineering", "Brackwater University")):
        for dept in rng.sample(FACULTIES[fac.split(" of ")[1]], rng.randint(0, 2)):
            name = f"Department of {dept}, {uni}"
            if name not in by_name:
                country = w.inst[by_name[uni]]["country_code"]
                w.institution(name, country, "department", by_name[f"{fac}, {uni}"])
    for name, country in rng.sample(COMPANIES, rng.randint(1, 2 + works // 400)):
        w.institution(name, country, "company")
    for name, country in rng.sample(HOSPITALS, rng.randint(1, 2)):
        w.institution(name, country, "healthcare")


def make_pool(w: World, works: int) -> None:
    """Filler persons: most with an ORCID; a few with a second author record under the same
    ORCID (never on the same work); the rest without one (each record its own person)."""
    rng = w.rng
    open_insts = [r["institution_id"] for r in w.institutions
                  if r["institution_id"] not in w.closed]
    weights = [3 if w.inst[i]["institution_type"] in ("department", "company", "healthcare")
               else 1 for i in open_insts]
    for _ in range(max(60, int(works * 0.8))):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        home = rng.choices(open_insts, weights)[0]
        orcid = make_orcid(rng) if rng.random() < 0.75 else None
        first_id = w.author(f"{first} {last}", home, orcid=orcid)
        person = w.persons[w.person_of[first_id]]
        if orcid and rng.random() < 0.08:
            w.author(f"{first[0]}. {last}", home, orcid=orcid)
        w.pool.append(person)


def home(w: World, author_id: str) -> tuple[str, list[str]]:
    """An author record listed with its home institution."""
    return author_id, [w.home[author_id]]


def cast_work(w: World, label: str | None, title: str, year: int, kind: str,
              lead: list[tuple[str, list[str]]], co: tuple[int, int], *,
              exclude_persons: Iterable[str] = (), exclude_insts: Iterable[str] = (),
              **kw: Any) -> str:
    """A cast work: its lead authors, then between co[0] and co[1] filler co-authors."""
    others = w.pick(w.rng.randint(*co), exclude_persons=exclude_persons,
                    exclude_insts=exclude_insts)
    return w.work(title, year, kind, lead + others, label=label, **kw)


def citer(w: World, cites: list[str], year_from: int, *, kind: str = "article",
          retracted: bool = False, avoid: Iterable[str] = (), year: int | None = None,
          label: str | None = None) -> str:
    """A work by filler authors citing `cites`, sharing no person with `avoid` works."""
    rng = w.rng
    persons = set().union(*(w.work_persons[a] for a in avoid)) if avoid else set()
    authors = w.pick(rng.randint(1, 4), exclude_persons=persons)
    wid = w.work(w.title(), year or rng.randint(year_from, LAST_YEAR), kind, authors,
                 retracted=retracted, label=label)
    for cited in cites:
        w.cite(wid, cited)
    return wid


def plant_cast(w: World, c: dict[str, str]) -> None:
    """The author records and works the questions name, each planting a trap."""
    rng = w.rng

    def orcid(label: str) -> str:
        return make_orcid(f"research/orcid/{label}")

    # who is who: one person under two records, two people under one name (one without ORCID)
    mira = orcid("mira")
    mira1 = w.author("Mira Castellan", c["ald_phy"], orcid=mira, label="mira1",
                     email="mira.castellan@aldermoor.example")
    mira2 = w.author("M. Castellan", c["ald_qo"], orcid=mira, label="mira2", email="")
    mira3 = w.author("Mira Castellan", c["brk_hist"], label="mira3")
    jonas1 = orcid("jonas1")
    jw1 = w.author("Jonas Weber", c["brk_cs"], orcid=jonas1, label="jw1")
    jw2 = w.author("Jonas Weber", c["brk_rob"], orcid=jonas1, label="jw2")
    jw3 = w.author("Jonas Weber", c["cor_mat"], orcid=orcid("jonas2"), label="jw3")
    jw4 = w.author("Jonas Weber", c["norland"], label="jw4")
    selma = w.author("Selma Okafor", c["ald_chem"], orcid=orcid("selma"), label="selma")
    tobias = w.author("Tobias Lindqvist", c["brk_cs"], orcid=orcid("tobias"), label="tobias")
    ines = w.author("Ines Duarte", c["ald_card"], orcid=orcid("ines"), label="ines")
    pia = w.author("Pia Rennard", c["ald_card"], orcid=orcid("pia"), label="pia")
    ravi = w.author("Ravi Anand", c["cor_mat"], orcid=orcid("ravi"), label="ravi")
    lena = w.author("Lena Marsh", c["helix"], orcid=orcid("lena"), label="lena")
    owen = w.author("Owen Petrie", c["helix"], label="owen")
    dara = w.author("Dara Voss", c["ald"], orcid=orcid("dara"), label="dara")

    ald_direct = {c["ald"]}
    # Mira: a self-citation under her other record, a citation from the other Mira that counts
    y_a = rng.randint(2019, 2020)
    m_a = cast_work(w, "mira-a", "Cavity-enhanced squeezing in trapped-ion arrays", y_a, "article",
                    [home(w, mira1)], (1, 2))
    m_b = cast_work(w, "mira-b", "Phase-stable squeezed light from a monolithic resonator",
                    rng.randint(2021, 2022), "article", [home(w, mira2)], (1, 2),
                    exclude_persons=w.work_persons[m_a],
                    exclude_insts=w.subtree(c["ald_phy"]))
    m_c = cast_work(w, "mira-c", "Guild letters and credit networks in the Hanseatic period",
                    rng.randint(2021, 2023), "article", [home(w, mira3)], (1, 2),
                    exclude_persons=w.work_persons[m_a])
    m_d = cast_work(w, "mira-d", "Squeezing-enhanced interferometry with trapped ions", 2022,
                    "article", [home(w, mira1)], (0, 2), exclude_insts=ald_direct)
    cast_work(w, "mira-e", "Merchant archives of the North Sea: a review", rng.randint(2022, 2024),
              "review", [home(w, mira3)], (0, 1))
    for cited_by in (m_b, m_c, m_d):
        w.cite(cited_by, m_a)
    for _ in range(rng.randint(1, 3)):
        citer(w, [m_a], y_a, avoid=[m_a])

    # Jonas Weber: four records, three persons; one person listed twice on one work
    jw_1 = cast_work(w, "jw-1", "Tactile sensing for soft robotic grippers", 2022, "article",
                     [home(w, jw1), home(w, jw2), home(w, jw3)], (0, 2),
                     exclude_persons={w.person_of[jw1], w.person_of[jw3]})
    cast_work(w, "jw-2", "Drift compensation in fibre-optic strain gauges", rng.randint(2019, 2024),
              "article", [home(w, jw4)], (1, 2))
    jw_3 = cast_work(w, "jw-3", "Corrosion of additively manufactured titanium lattices",
                     rng.randint(2019, 2021), "article", [home(w, jw3)], (1, 2))
    w.cite(jw_1, jw_3)

    # Tobias: two affiliations on one work; a preprint and its published version
    outside = w.subtree(c["ald"]) | w.subtree(c["brk"])
    tl_1 = cast_work(w, "tl-1", "Learning contact dynamics for legged robots", 2023, "article",
                     [(tobias, [c["brk_cs"], c["ald_phy"]]), home(w, jw1)], (1, 2),
                     exclude_persons={w.person_of[jw1]}, exclude_insts=outside)
    y_t = rng.randint(2019, 2021)
    tl_2 = cast_work(w, "tl-2", "Sim-to-real transfer for quadruped locomotion", y_t + 1, "article",
                     [home(w, tobias)], (1, 3))
    tl_authors = [(r["author_id"], [r["institution_id"]]) for r in w.authorships
                  if r["work_id"] == tl_2]
    w.work("Sim-to-real transfer for quadruped locomotion", y_t, "preprint", tl_authors,
           label="tl-2-pre", published=tl_2)
    w.cite(tl_1, tl_2)

    # Selma: a preprint never published is a work of its own (and counted output)
    for label, title, kind, years in (
            ("so-1", "Ligand design for selective CO2 capture", "article", (2019, 2021)),
            ("so-2", "Metal-organic frameworks for gas separation: a review", "review",
             (2020, 2022)),
            ("so-pre", "Solvent-free synthesis of porous imine cages", "preprint", (2022, 2024))):
        cast_work(w, label, title, rng.randint(*years), kind, [home(w, selma)], (0, 2))

    # Ines: a preprint and its published version, cited as either; self-citations; datasets
    y_p = rng.randint(2020, 2021)
    id_2 = cast_work(w, "id-2", "Exercise-induced arrhythmias in veteran marathon runners",
                     rng.randint(2019, 2020), "article", [home(w, ines)], (1, 2))
    id_pub = cast_work(w, "id-pub", "Troponin release kinetics after prolonged endurance exercise",
                       y_p + 1, "article", [home(w, ines)], (1, 3), corresponding=0)
    pub_authors = [(r["author_id"], [r["institution_id"]]) for r in w.authorships
                   if r["work_id"] == id_pub]
    id_pre = w.work("Troponin release kinetics after endurance exercise", y_p, "preprint",
                    pub_authors, label="id-pre", published=id_pub)
    id_3 = cast_work(w, "id-3", "Cardiac biomarkers in ultra-endurance athletes: a cohort study",
                     rng.randint(2023, 2024), "article", [home(w, ines)], (0, 1))
    w.cite(id_3, id_pub)
    w.cite(id_3, id_2)
    cast_work(w, "id-ds", "Troponin exercise cohort: raw measurements", 2024, "dataset",
              [home(w, ines)], (0, 1))
    cast_work(w, "pia-ds", "Ambulatory ECG recordings of amateur cyclists", 2024, "dataset",
              [home(w, pia)], (0, 1))
    cast_work(w, "pia-1", "Heart-rate variability as an early marker of overtraining", 2024,
              "article", [home(w, pia)], (1, 2))
    for _ in range(rng.randint(1, 3)):
        citer(w, [id_pub], y_p + 1, avoid=[id_pub])
    for _ in range(rng.randint(1, 2)):
        citer(w, [id_pre], y_p, avoid=[id_pub])
    citer(w, [id_pre, id_pub], y_p + 1, avoid=[id_pub])          # cites both versions: once
    y_c = rng.randint(y_p + 1, 2023)
    cp_pub = citer(w, [id_pub], y_c + 1, avoid=[id_pub], year=y_c + 1)  # a citing pair: once
    cp_row = w.work_row[cp_pub]
    cp_authors = [(r["author_id"], [r["institution_id"]]) for r in w.authorships
                  if r["work_id"] == cp_pub]
    cp_pre = w.work(cp_row["title"], y_c, "preprint", cp_authors, published=cp_pub)
    w.cite(cp_pre, id_pre)
    citer(w, [id_pub], y_p + 1, kind="dataset", avoid=[id_pub])  # not output: does not count
    citer(w, [id_pub], y_p + 1, retracted=True, avoid=[id_pub])  # retracted: does not count

    # Ravi: a retracted article and datasets beside his counted works
    for label, title, kind, retracted in (
            ("ra-1", "Grain-boundary strengthening in nanotwinned copper", "article", True),
            ("ra-2", "Nanoindentation maps of twinned copper films", "dataset", False),
            ("ra-3", "Fatigue of twinned copper interconnects", "article", False)):
        cast_work(w, label, title, 2021, kind, [home(w, ravi)], (0, 2), retracted=retracted)
    for _ in range(rng.randint(0, 2)):
        cast_work(w, None, w.title(), rng.choice((2020, 2021, 2022)), "article", [home(w, ravi)],
                  (0, 2))
    cast_work(w, "ra-ds", "Creep curves of copper thin films at 400 K", 2023, "dataset",
              [home(w, ravi)], (0, 1))

    # Helix: a company without sub-units, every work shared with outsiders
    helix_insts = {c["helix"]}
    cast_work(w, "hx-1", "Synthetic control methods for retail demand", rng.randint(2019, 2024),
              "article", [home(w, lena)], (1, 2), exclude_insts=helix_insts)
    cast_work(w, "hx-2", "Causal forests for pricing experiments", rng.randint(2019, 2024),
              "article", [home(w, owen), home(w, lena)], (1, 2), exclude_insts=helix_insts)
    if rng.random() < 0.5:
        cast_work(w, "hx-3", "Uplift modelling in practice: a review", rng.randint(2020, 2024),
                  "review", [home(w, owen)], (1, 1), exclude_insts=helix_insts)

    # Dara: affiliated with the university itself, not a unit
    cast_work(w, "dv-1", "Research evaluation with open citation data", 2022, "article",
              [home(w, dara)], (0, 2))
    cast_work(w, "dv-2", "Mapping interdisciplinary collaboration at a research university",
              rng.randint(2023, 2024), "article", [home(w, dara)], (1, 2))


def plant_versions(w: World, c: dict[str, str]) -> None:
    """More cast, planted after the first so that the first keeps its draws: a preprint whose
    published version lists other authors and affiliations (the Work clause), a published
    version retracted after its preprint was posted, a preprint published as a review,
    preprints never published beside one that was, and cast works cited by self-citations,
    datasets and retracted works beside citations that count. Years are fixed, so every
    question about them keeps its trap at every seed."""
    def orcid(label: str) -> str:
        return make_orcid(f"research/orcid/{label}")

    def versions(label: str, published: str, year: int) -> str:
        """The preprint of `published`: its title and authors, an earlier year."""
        row = w.work_row[published]
        authors = [(r["author_id"], [r["institution_id"]]) for r in w.authorships
                   if r["work_id"] == published]
        return w.work(row["title"], year, "preprint", authors, label=label, published=published)

    # the Work clause: Kofi Mensah posted the preprint from Brackwater with a student at
    # Aldermoor; the published version lists him at Corran, without the student, with a new
    # co-author. No other author of either version is at any of the three universities.
    kofi = orcid("kofi")
    kofi1 = w.author("Kofi Mensah", c["brk_cs"], orcid=kofi, label="kofi1",
                     email="kofi.mensah@brackwater.example")
    kofi2 = w.author("K. Mensah", c["cor_mat"], orcid=kofi, label="kofi2")
    nils = w.author("Nils Ekdahl", c["ald_chem"], orcid=orcid("nils"), label="nils")
    away = w.subtree(c["ald"]) | w.subtree(c["brk"]) | w.subtree(c["cor"])
    both = w.pick(1, exclude_insts=away)
    later = w.pick(1, exclude_persons={w.person_of[a] for a, _ in both}, exclude_insts=away)
    title = "Operando X-ray tomography of solid-state battery interfaces"
    pv_pub = w.work(title, 2023, "article", [(kofi1, [c["cor_mat"]])] + both + later,
                    label="pv-pub")
    pv_pre = w.work(title, 2022, "preprint", [(kofi1, [c["brk_cs"]]), home(w, nils)] + both,
                    label="pv-pre", published=pv_pub)
    cast_work(w, "ne-1", "Calorimetry of sulfide electrolytes under cycling", 2021, "article",
              [home(w, nils)], (1, 2))
    # citations reaching it: through both versions at once (one citation), through the
    # preprint, from the same person under another record (a self-citation), from a dataset,
    # and from both versions of one citing work (one citation)
    pv = [pv_pub, pv_pre]
    citer(w, [pv_pre, pv_pub], 2023, avoid=pv, label="pvc-1")
    citer(w, [pv_pre], 2022, avoid=pv, label="pvc-2")
    self_cite = cast_work(w, "pvc-3", "Interphase growth in sulfide solid electrolytes", 2024,
                          "article", [home(w, kofi2)], (0, 1),
                          exclude_persons=w.work_persons[pv_pub] | w.work_persons[pv_pre])
    w.cite(self_cite, pv_pub)
    citer(w, [pv_pub], 2023, kind="dataset", avoid=pv, label="pvc-ds")
    pair = citer(w, [pv_pub], 2024, avoid=pv, year=2024, label="pvc-4")
    w.cite(versions("pvc-4-pre", pair, 2023), pv_pre)

    # a published version retracted after its preprint was posted
    amara = w.author("Amara Nwosu", c["brk_hist"], orcid=orcid("amara"), label="amara")
    cast_work(w, "am-1", "Parish registers and famine mortality in the 1740s", 2021, "article",
              [home(w, amara)], (0, 2))
    rp_pub = cast_work(w, "rp-pub", "Grain prices and petitions in early modern ports", 2024,
                       "article", [home(w, amara)], (1, 2), retracted=True)
    versions("rp-pre", rp_pub, 2023)

    # a preprint published as a review
    dara = cast_id("A", 10, "dara")
    pt_pub = cast_work(w, "pt-pub", "Coverage and bias of open citation indexes", 2021,
                       "review", [home(w, dara)], (1, 2))
    versions("pt-pre", pt_pub, 2020)

    # preprints never published, beside one that was
    noor = w.author("Noor Haddad", c["cor_mat"], orcid=orcid("noor"), label="noor")
    cast_work(w, "nh-1", "Hydrogen trapping at twin boundaries in nickel alloys", 2022,
              "preprint", [home(w, noor)], (0, 2))
    cast_work(w, "nh-2", "Fatigue crack growth in cold-sprayed aluminium", 2023, "preprint",
              [home(w, noor)], (0, 2))
    nh_4 = cast_work(w, "nh-4", "Residual stress in laser-welded steel joints", 2022, "article",
                     [home(w, noor)], (1, 2))
    versions("nh-3", nh_4, 2021)
    cast_work(w, "nh-ds", "Thermal desorption spectra of hydrogen in nickel alloys", 2022,
              "dataset", [home(w, noor)], (0, 1))

    # one more Jonas Weber work, by the record without an ORCID, sharing nobody with jw-1
    jw_1 = cast_id("W", 10, "jw-1")
    cast_work(w, "jw-5", "Fibre Bragg gratings for subsea strain monitoring", 2023, "article",
              [home(w, cast_id("A", 10, "jw4"))], (1, 2), exclude_persons=w.work_persons[jw_1])

    # citations that do not count beside those that do: jw-3 and id-2 are cited by their own
    # authors (planted above) and by others; ra-3 by others, a dataset and a retracted work
    for label, cited, year_from in (("jwc-1", "jw-3", 2021), ("jwc-2", "jw-3", 2021),
                                    ("idc-1", "id-2", 2021), ("rac-1", "ra-3", 2021),
                                    ("rac-2", "ra-3", 2021)):
        wid = cast_id("W", 10, cited)
        citer(w, [wid], year_from, avoid=[wid], label=label)
    ra_3 = cast_id("W", 10, "ra-3")
    citer(w, [ra_3], 2022, kind="dataset", avoid=[ra_3], label="rac-ds")
    citer(w, [ra_3], 2022, retracted=True, avoid=[ra_3], label="rac-rt")


# --- the filler ----------------------------------------------------------------------------------

def fill(w: World, count: int) -> None:
    """Random works by pool persons: articles, reviews, preprints (half of them published
    later), datasets, a few retracted; then random citations among them."""
    rng = w.rng
    open_insts = [r["institution_id"] for r in w.institutions
                  if r["institution_id"] not in w.closed]
    made: list[str] = []
    while count > 0:
        year = rng.randint(FIRST_YEAR, LAST_YEAR)
        kind = rng.choices(KINDS, (66, 10, 14, 10))[0]
        persons = rng.sample(w.pool, rng.choices((1, 2, 3, 4, 5, 6), (2, 4, 5, 4, 2, 1))[0])
        authors = []
        for p in persons:
            insts = [p.home]
            if rng.random() < 0.12:
                extra = rng.choice(open_insts)
                if extra != p.home:
                    insts.append(extra)
            authors.append((rng.choice(p.records), insts))
        title = w.title()
        corresponding = rng.randrange(len(authors))
        if kind == "preprint" and count >= 2 and year < LAST_YEAR and rng.random() < 0.5:
            pub = w.work(title, rng.randint(year, min(year + 1, LAST_YEAR)), "article", authors,
                         corresponding=corresponding)
            made.append(pub)
            made.append(w.work(title, year, "preprint", authors, published=pub,
                               corresponding=corresponding))
            count -= 2
            continue
        retracted = kind in ("article", "review") and rng.random() < 0.05
        made.append(w.work(title, year, kind, authors, retracted=retracted,
                           corresponding=corresponding))
        count -= 1
    for wid in made:
        row = w.work_row[wid]
        if row["work_type"] == "dataset" and rng.random() < 0.7:
            continue
        year = row["publication_year"]
        candidates = [o for o in made if w.work_row[o]["publication_year"] <= year
                      and w.group_of[o] != w.group_of[wid]]
        for cited in rng.sample(candidates, min(len(candidates), rng.randint(0, 5))):
            w.cite(wid, cited)


def finish(w: World) -> dict[str, list[Row]]:
    """Order every table by its key; drop the generator's bookkeeping."""
    authorships = sorted(w.authorships, key=lambda r: (r["work_id"], r["_order"],
                                                       r["institution_id"]))
    for r in authorships:
        del r["_order"]
    return {
        "works": sorted(w.works, key=lambda r: r["work_id"]),
        "authors": sorted(w.authors, key=lambda r: r["author_id"]),
        "institutions": sorted(w.institutions, key=lambda r: r["institution_id"]),
        "authorships": authorships,
        "citations": [{"citing_work_id": a, "cited_work_id": b} for a, b in sorted(w.citations)],
        "author_emails": [{"author_id": a, "email": e} for a, e in sorted(w.emails.items())],
    }
