"""The defaults file is the single documented source of every key."""

import pickle
import re

import pytest

from crawl_udfs import config

CONTRACT_KEYS = [
    "storage.root", "spark.master", "crawler.agent_name", "crawler.user_agent",
    "politeness.host_delay_s", "net.hosts_file", "net.allow_private_cidrs",
    "generate.top_n", "generate.max_urls_per_host", "budget.max_pages_per_host",
]


def _keys_with_comment_flags():
    """(dotted key, has a comment line directly above it) for every key in the file."""
    section, prev_comment = None, False
    for raw in config.DEFAULTS_PATH.read_text().splitlines():
        line = raw.strip()
        if m := re.fullmatch(r"\[([a-z_]+)\]", line):
            section, prev_comment = m.group(1), False
        elif line.startswith("#"):
            prev_comment = len(line.lstrip("# ")) > 0
        elif m := re.match(r"([a-z_0-9]+)\s*=", line):
            yield f"{section}.{m.group(1)}", prev_comment
            prev_comment = False
        elif not line:
            prev_comment = False


def test_every_key_has_a_comment():
    keys = list(_keys_with_comment_flags())
    assert len(keys) > 30
    missing = [k for k, ok in keys if not ok]
    assert missing == [], f"keys without a comment directly above them: {missing}"


def test_every_key_is_loaded_once():
    keys = [k for k, _ in _keys_with_comment_flags()]
    assert len(keys) == len(set(keys))
    conf = config.load()
    for k in keys:
        conf.get(k)  # raises if the loader lost it


def test_contract_keys_exist():
    conf = config.defaults()
    for k in CONTRACT_KEYS:
        conf.get(k)


def test_overrides_typed_and_frozen(tmp_path):
    conf = config.load(overrides=["politeness.host_delay_s=2", 'net.allow_private_cidrs=["127.10.0.0/16"]',
                                  "storage.root=/data/crawl"])
    assert conf.politeness.host_delay_s == 2.0 and isinstance(conf.politeness.host_delay_s, float)
    assert conf.net.allow_private_cidrs == ("127.10.0.0/16",)
    assert conf.storage.root == "/data/crawl"
    with pytest.raises(AttributeError):
        conf.politeness.host_delay_s = 3
    assert pickle.loads(pickle.dumps(conf)) == conf
    overlay = tmp_path / "c.toml"
    overlay.write_text('[generate]\ntop_n = 7\n')
    assert config.load([overlay], ["generate.top_n=9"]).generate.top_n == 9
    assert config.load([overlay]).generate.top_n == 7


@pytest.mark.parametrize("pair, message", [
    ("fetch.max_body_bytes=lots", "expects int"),
    ("fetch.no_such_key=1", "unknown configuration key"),
    ("nosection=1", "section.key=value"),
    ("crawler.agent_name=3", "expects str"),
    ("spark.ui_enabled=1", "expects bool"),
])
def test_bad_overrides_are_one_line_errors(pair, message):
    with pytest.raises(config.ConfigError) as e:
        config.load(overrides=[pair])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_bad_files_are_clear(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[fetch\n")
    with pytest.raises(config.ConfigError, match="not valid TOML"):
        config.load([bad])
    with pytest.raises(config.ConfigError, match="not found"):
        config.load([tmp_path / "missing.toml"])
