"""Settings by concern (the run plan, the model's config, the limits, the engines, the paths):
one name per setting, stored flat as before, and the flat names of 0.x for one release."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from pytest_kgbench.core.settings import GROUP_OF, GROUPS, Settings


def test_each_setting_has_one_part_and_one_name() -> None:
    names = [f.name for kind in GROUPS.values() for f in fields(kind)]
    assert len(names) == len(set(names)) == len(GROUP_OF)  # no name in two parts
    assert not set(names) & set(GROUPS)  # nor one a part's own name


def test_the_stored_form_is_flat_and_reads_back_the_same(tmp_path) -> None:
    settings = Settings.at(tmp_path, condition_ids=("R1", "D4"), models=("sonnet",),
                           query_timeout=5.0, engines={"sparql": "oxigraph"}, sample=3,
                           temperature=0.2, rerun=("a::b",))
    stored = json.loads(json.dumps(settings.to_dict()))
    assert set(stored) == set(GROUP_OF)  # meta.json's keys: every setting, flat, as in 0.x
    assert stored["query_timeout"] == 5.0 and stored["condition_ids"] == ["R1", "D4"]
    assert Settings.from_dict(stored) == settings
    # a meta.json from before a setting existed reads back with its default
    older = {k: v for k, v in stored.items() if k != "tpm"}
    assert Settings.from_dict(older).limits.tpm is None


def test_but_changes_only_what_it_names(tmp_path) -> None:
    settings = Settings.at(tmp_path, models=("sonnet",), max_tokens=100)
    other = settings.but(base_url="http://127.0.0.1:1/v1", run_id="x")
    assert (other.model.base_url, other.plan.run_id) == ("http://127.0.0.1:1/v1", "x")
    assert other.model.max_tokens == 100 and other.paths == settings.paths
    assert settings.model.base_url is None  # frozen: the original is untouched
    with pytest.raises(TypeError, match="no such setting: max_token"):
        settings.but(max_token=5)


def test_the_flat_names_of_0x_still_read_with_a_warning(tmp_path) -> None:
    settings = Settings.at(tmp_path, query_timeout=7.0)
    with pytest.warns(DeprecationWarning, match=r"Settings.query_timeout is "
                                                r"Settings.limits.query_timeout now"):
        assert settings.query_timeout == 7.0  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no attribute 'query_timeot'"):
        settings.query_timeot  # type: ignore[attr-defined]  # noqa: B018
