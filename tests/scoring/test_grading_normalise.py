"""The normalisers each field kind compares with (docs/grading.md states every rule): decided
examples on both sides, and hypothesis properties over the forms a model writes."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_kgbench.scoring.answer_key import compute_key
from pytest_kgbench.scoring.answers import Answer
from pytest_kgbench.scoring.fieldkinds import (
    UNRATED,
    norm_date,
    norm_entity,
    norm_identifier,
    norm_number,
    norm_quantity,
    norm_rating,
    norm_string,
    norm_text,
    norm_yesno,
)
from pytest_kgbench.scoring.grading import grade

PROPERTY = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))
SCALE = ["AAA", "AA+", "AA", "AA-", "A+", "A", "A-", "BBB+", "BBB", "BBB-", "BB+", "BB", "BB-",
         "B+", "B", "B-", "CCC+", "CCC", "CCC-", "CC", "C", "D"]


# --- ratings -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("written", "read"), [
    ("A + (stable)", "A+"), ("A + stable", "A+"), ("A - (stable)", "A-"), ("it is rated A+", "A+"),
    ("It is unrated.", UNRATED), ("rating: BBB-", "BBB-"), ("a rating of A-", "A-"),
    ("A+ (upgraded from A)", "A+"), ("A minus", "A-"), ("A plus", "A+"),
    ("A+", "A+"), ("a+", "A+"), ("A\u2212", "A-"), ("A +", "A+"), ("BBB -", "BBB-"),
    ("A+.", "A+"), ("A+!", "A+"), ("A+ (stable outlook)", "A+"), ("BBB+/Stable", "BBB+"),
    ("A+ *-", "A+"), ("A+, on watch for possible downgrade", "A+"), ("A \u2013 stable", "A"),
    ("Unrated.", UNRATED), ("not rated (withdrawn)", UNRATED),
    ("unrated (rating withdrawn)", UNRATED), ("NR", UNRATED), ("N.R.", UNRATED),
    ("no rating", UNRATED), ("Withdrawn", UNRATED), ("NR (previously A+)", UNRATED),
    ("unrated since 2023-05-01", UNRATED), ("WD", UNRATED),
])
def test_ratings_read(written, read) -> None:
    assert norm_rating(written) == read


@pytest.mark.parametrize(("written", "not_read_as"), [
    ("A++", "A+"), ("A+-", "A+"), ("A+ -", "A+"), ("A-+", "A-"), ("AA or A+", "AA"),
    ("A +-", "A+"), ("it is rated A+ or AA-", "A+"),
    ("B B B", "BBB"), ("BBB+ (unrated)", "BBB+"), ("unrated (or A+)", UNRATED),
    ("a rating of A+ or AA-", "A+"), ("Aa3", "AA"), ("AA+ / AA", "AA+"), ("A+?", "A+"),
    ("not sure", UNRATED), ("rated", UNRATED),
])
def test_ratings_refused(written, not_read_as) -> None:
    read = norm_rating(written)
    assert read != not_read_as
    assert read not in SCALE and read != UNRATED  # unreadable: it matches no key at all


ANNOTATIONS = st.sampled_from(["", " (stable outlook)", "/Stable", " *-", " *+", ", negative",
                               " (on watch for possible downgrade)", " outlook positive",
                               " - developing", ".", " ", "!"])


@PROPERTY
@given(rating=st.sampled_from(SCALE), note=ANNOTATIONS, lower=st.booleans(),
       dash=st.sampled_from(["-", "\u2212", "\u2013", "\u2011"]))
def test_a_rating_with_an_outlook_or_watch_reads_as_the_rating(rating, note, lower, dash):
    written = rating.replace("-", dash) + note
    assert norm_rating(written.lower() if lower else written) == rating


@PROPERTY
@given(rating=st.sampled_from([r for r in SCALE if r[-1] in "+-"]),
       extra=st.sampled_from(["+", "-", "+-", "++", " +", "-+"]), note=ANNOTATIONS)
def test_a_second_modifier_is_never_read(rating, extra, note):
    read = norm_rating(rating + extra + note)
    assert read not in SCALE and read != UNRATED


UNRATED_WORDS = st.sampled_from(["unrated", "not rated", "NR", "withdrawn", "rating withdrawn",
                                 "no rating", "N.R.", "WR", "not currently rated"])


@PROPERTY
@given(first=UNRATED_WORDS, more=st.lists(UNRATED_WORDS, max_size=2),
       wrap=st.sampled_from(["{}", "({})", "[{}]", "- {}"]), end=st.sampled_from(["", ".", "!"]))
def test_unrated_in_any_words_reads_as_unrated(first, more, wrap, end):
    written = " ".join([first, *(wrap.format(m) for m in more)]) + end
    assert norm_rating(written) == UNRATED


@PROPERTY
@given(rating=st.sampled_from(SCALE), words=UNRATED_WORDS)
def test_a_rating_beside_unrated_is_neither(rating, words):
    for written in (f"{rating} ({words})", f"{words} or {rating}"):
        read = norm_rating(written)
        assert read not in SCALE and read != UNRATED


@PROPERTY
@given(st.text(max_size=300))
def test_any_text_reads_as_a_rating_or_not_without_raising(text):
    read = norm_rating(text)
    assert read is None or isinstance(read, str)
    if read is not None and (read in SCALE or read == UNRATED):
        assert norm_rating(read) == read  # what is read reads the same again


# --- yes/no --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("written", "read"), [
    ("Yes.", True), ("No.", False), ("NO!", False), ("true", True), ("False", False),
    ("y", True), ("n", False), (1, True), (0, False), (True, True), (False, False),
    ("no, it does not", False), ("Yes - through Ardent Holdings (60%)", True),
    ("no, I cannot tell", None), ("No, no control", None), ("yes or no", None),
    ("yes and no", None), ("not", None), ("nope", False), ("yep", True),
    (2, None), ("", None), (None, None),
])
def test_yesno(written, read) -> None:
    assert norm_yesno(written) is read


@PROPERTY
@given(word=st.sampled_from(["yes", "no", "true", "false"]),
       case=st.sampled_from([str.lower, str.upper, str.title]),
       end=st.sampled_from(["", ".", "!", " ", " .", "!!"]))
def test_a_yes_or_no_with_its_full_stop_is_read(word, case, end):
    assert norm_yesno(case(word) + end) is (word in ("yes", "true"))


@PROPERTY
@given(word=st.sampled_from(["yes", "no"]), rest=st.text(min_size=1, max_size=30),
       mark=st.sampled_from([", ", ": ", " - ", "; "]))
@example(word="yes", rest="\u20100", mark=", ")  # a Unicode hyphen: a dash, as "-" is
@example(word="no", rest="\uff0c it is not", mark=", ")  # a full-width comma
def test_a_yes_or_no_with_more_words_is_read_as_itself_or_not_at_all(word, rest, mark):
    """Words after a yes or no are its reason at most: never read as the other answer, and
    not read at all without a comma, colon or dash ("yes and no") in any spelling the grader
    reads as one (norm_text: "\u2010" is "-", "\uff0c" is ",")."""
    if re.fullmatch(r"[\s.!]*", rest):
        return  # only a full stop or spaces: read (the property above)
    assert norm_yesno(f"{word}{mark}{rest}") in (None, word == "yes")
    if not re.match(r"[\s,;:.!-]", norm_text(rest)):
        assert norm_yesno(f"{word} {rest}") is None


# --- numbers and dates --------------------------------------------------------------------------

@pytest.mark.parametrize(("written", "read"), [
    ("12 issuers", 12.0), ("1,200.5 EUR", 1200.5), ("USD 1,200", 1200.0), ("3 works.", 3.0),
    ("about 12", None), ("12 or 13", None), ("1.2 million", None), ("12 percent", None),
    ("7 of 9", None), ("12 (approx)", None), ("EUR 12 million", None), ("USD", None),
])
def test_a_number_with_its_unit(written, read) -> None:
    assert norm_quantity(written) == read


@pytest.mark.parametrize(("written", "read"), [
    ("2024-06-30", "2024-06-30"), ("2024-06-30.", "2024-06-30"), ("2024-6-30", "2024-06-30"),
    ("30 June 2024", "2024-06-30"), ("June 30, 2024", "2024-06-30"), ("Jun 30 2024", "2024-06-30"),
    ("2024-06-30T10:00:00Z", "2024-06-30"), ("30/06/2024", "2024-06-30"),
    ("06/30/2024", "2024-06-30"), ("30.06.2024", "2024-06-30"), ("05/05/2024", "2024-05-05"),
])
def test_dates_read(written, read) -> None:
    assert norm_date(written) == read


@pytest.mark.parametrize("written", ["05/06/2024", "06/05/2024", "2024-13-01", "2024-02-30",
                                     "2032-11-271", "31/02/2024", "mid-2024"])
def test_dates_refused(written) -> None:
    assert norm_date(written) == written.strip()  # kept as written: equal to no date


@PROPERTY
@given(day=st.dates(min_value=dt.date(1000, 1, 1)),
       form=st.sampled_from(["%Y-%m-%d", "%d %B %Y", "%B %d, %Y", "%d %b %Y"]))
def test_a_date_in_an_accepted_form_is_that_date(day, form):
    assert norm_date(day.strftime(form)) == day.isoformat()


@PROPERTY
@given(number=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
       unit=st.sampled_from(["", " issuers", " EUR", " bps"]))
def test_a_number_written_with_separators_and_a_unit_is_itself(number, unit):
    written = f"{number:,.6f}{unit}"
    assert norm_quantity(written) == pytest.approx(float(f"{number:.6f}"), abs=1e-9)


# --- identifiers: DOIs and ORCID iDs (research Q02, Q03, Q05) ---------------------------------

DOI_FORMS = ["{}", "https://doi.org/{}", "http://dx.doi.org/{}", "doi:{}", "DOI: {}",
             "DOI {}", "doi.org/{}", "<https://doi.org/{}>", "{}."]
ORCID_FORMS = ["{}", "https://orcid.org/{}", "orcid.org/{}", "ORCID: {}", "orcid:{}",
               "<https://orcid.org/{}>", "{}."]


@PROPERTY
@given(registrant=st.integers(1000, 99999999), suffix=st.from_regex(
    r"[A-Za-z0-9][A-Za-z0-9._;()/-]{0,20}[A-Za-z0-9]", fullmatch=True),
       form=st.sampled_from(DOI_FORMS), upper=st.booleans())
def test_a_doi_in_any_cited_form_is_the_doi(registrant, suffix, form, upper):
    doi = f"10.{registrant}/{suffix}"
    written = form.format(doi.upper() if upper else doi)
    assert norm_identifier(written) == norm_identifier(doi) == doi.casefold()


@PROPERTY
@given(digits=st.from_regex(r"[0-9]{15}[0-9X]", fullmatch=True), form=st.sampled_from(ORCID_FORMS),
       hyphens=st.booleans())
def test_an_orcid_in_any_cited_form_is_the_orcid(digits, form, hyphens):
    orcid = "-".join(digits[i:i + 4] for i in range(0, 16, 4))
    written = form.format(orcid if hyphens else digits)
    assert norm_identifier(written) == orcid


@pytest.mark.parametrize(("written", "key", "same"), [
    ("https://doi.org/10.5555%2Fpreprint.2022.943239", "10.5555/preprint.2022.943239", True),
    ("10.5555/preprint.2022.943238", "10.5555/preprint.2022.943239", False),
    ("https://doi.org/10.5555/preprint.2022.943239/v2", "10.5555/preprint.2022.943239", False),
    ("0000-0003-1898-5868", "0000-0003-1898-5867", False),
    ("https://orcid.org/0000-0003-1898-5867", "0000-0003-1898-5867", True),
    ("IE.", "IE", True), (" ie ", "IE", True), ("Ireland", "IE", False),
    ("IE (Ireland)", "IE", False), ("GB", "IE", False),
])
def test_identifiers(written, key, same) -> None:
    assert (norm_identifier(written) == norm_identifier(key)) is same


def test_research_dois_orcids_and_codes_grade_right_in_their_usual_forms(
        research_base, research_questions) -> None:
    """research Q02 (an ORCID), Q03 (a country code), Q05 (a DOI): each written the ways
    they are cited grades C (as `kind: string` they graded W), a neighbour grades W."""
    by_id = {q.id: q for q in research_questions.questions}
    forms = {"research-Q02": ORCID_FORMS, "research-Q05": DOI_FORMS,
             "research-Q03": ["{}", "{}.", " {} ", "{lower}"]}
    for qid, shapes in forms.items():
        q = by_id[qid]
        key = compute_key(q, research_base)
        (name, value), = key.items()
        for shape in shapes:
            written = shape.format(value, lower=value.lower())
            got = grade(q, key, Answer(block={name: written}), research_base.aliases)
            assert got.grade == "correct", (qid, written)
        wrong = value[:-1] + ("0" if value[-1] != "0" else "1")
        got = grade(q, key, Answer(block={name: DOI_FORMS[1].format(wrong)}),
                    research_base.aliases)
        assert got.grade == "wrong", (qid, wrong)


# --- entities ------------------------------------------------------------------------------------

ALIASES = {"iss-18263": "5493001KJTIIGC8Y1R12", "5493001kjtiigc8y1r12": "5493001KJTIIGC8Y1R12",
           "iss-95301": "LEI2", "lei2": "LEI2",
           "w6265943239": "W6265943239", "10.5555/preprint.2022.943239": "W6265943239"}
ENTITY_FORMS = ["{}", "issuer:{}", "cri:issuer/{}", "<https://kgbench.example/credit/id/issuer/{}>",
                "https://kgbench.example/credit/id/issuer/{}", "cri:issuer\\/{}", "{}.", '"{}"',
                "`{}`", ":{}", "issuer/{}", " {} ", "<https://kgbench.example/credit/id#{}>"]


@PROPERTY
@given(form=st.sampled_from(ENTITY_FORMS), which=st.sampled_from(["ISS-18263",
                                                                  "5493001KJTIIGC8Y1R12"]),
       case=st.sampled_from([str.lower, str.upper, str]))
def test_an_id_in_any_spelling_is_its_entity(form, which, case):
    assert norm_entity(form.format(case(which)), ALIASES) == "5493001kjtiigc8y1r12"
    assert norm_entity(form.format("ISS-95301"), ALIASES) == "lei2"


@pytest.mark.parametrize(("written", "read"), [
    ("ISS-18263 (Norvik Holdings plc)", "5493001kjtiigc8y1r12"),
    ("Norvik Holdings plc (ISS-18263)", "5493001kjtiigc8y1r12"),
    ("ISS-18263 (ISS-95301)", "iss-18263(iss-95301)"),       # two entities: neither
    ("ISS-18263, ISS-95301", "iss-18263,iss-95301"),          # a list in an entity field
    ("https://doi.org/10.5555/preprint.2022.943239", "w6265943239"),
    ("doi:10.5555/PREPRINT.2022.943239", "w6265943239"),
    ("DOI 10.5555/preprint.2022.943239", "w6265943239"),
    ("ISS-1826", "iss-1826"), ("ISS-182630", "iss-182630"),   # near ids are other ids
    ("issuer:ISS-18263/extra", "extra"),          # an IRI no alias names: its last segment
    ("author:A123", "a123"), ("<https://x.example/author/A123>", "a123"),
])
def test_entity_edges(written, read) -> None:
    assert norm_entity(written, ALIASES) == read


@PROPERTY
@given(st.text(max_size=200))
def test_any_text_normalises_without_raising(text):
    for fn in (norm_rating, norm_yesno, norm_number, norm_date, norm_string, norm_identifier):
        fn(text)
    norm_entity(text, ALIASES)
