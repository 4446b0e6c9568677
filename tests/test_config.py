"""The defaults file is the single documented source of every key."""

import pickle
import re

import pytest

from crawl_udfs import config, config_rules

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


# ---- every value meets its key's rule (crawl_udfs/config_rules.py) ----

def test_every_key_has_a_rule_and_every_rule_a_key():
    keys = {k for k, _ in _keys_with_comment_flags()}
    assert sorted(keys - set(config_rules.RULES)) == [], "keys of conf/defaults.toml with no rule in config_rules.RULES"
    assert sorted(set(config_rules.RULES) - keys) == [], "rules for keys conf/defaults.toml does not have"
    for small, large, _ in config_rules.RELATIONS:
        assert {small, large} <= keys


@pytest.mark.parametrize("pair, words", [
    ("politeness.host_delay_s=-1", "must be >= 0"),             # once turned politeness off silently
    ("politeness.max_in_flight_per_host=0", "must be >= 1"),
    ("politeness.max_in_flight_per_ip=0", "must be >= 1"),
    ("politeness.failure_park_duration_s=-5", "must be >= 0"),
    ("robots.cache_ttl_s=90000", "must be within 0..86400"),
    ("fetch.total_timeout_s=0", "must be > 0"),                  # aiohttp reads 0 as "no timeout"
    ("fetch.max_compression_ratio=0.5", "must be >= 1"),
    ("fetch.max_redirect_hops=-1", "must be >= 0"),
    ('fetch.keep_headers=["Content-Type"]', "element 'Content-Type' must be a lower-case header name"),
    ("net.allow_private_cidrs=[0]", "element 0 must be a string"),
    ('net.allow_private_cidrs=["10.1.2.3/8"]', "element '10.1.2.3/8' is not a CIDR network (10.1.2.3/8 has host bits set)"),
    ('net.allow_private_cidrs=["10.0.0.0/33"]', "element '10.0.0.0/33' is not a CIDR network"),
    ('net.allow_private_cidrs=["localhost"]', "element 'localhost' is not a CIDR network"),
    ("url.max_length=0", "must be >= 1"),
    ('url.query_order="random"', "must be one of 'keep', 'sort'"),
    ('url.tracking_params=["a*b"]', "element 'a*b' must be a parameter name"),
    ("parse.max_link_density=1.5", "must be within 0..1"),
    ("parse.link_cache_entries=0", "must be >= 1"),
    ('filter.deny_patterns=["(unclosed"]', "element '(unclosed' is not a valid regular expression"),
    ('scope.allow_hosts=["[a-"]', "is not a valid regular expression"),
    ("simhash.shingle_words=0", "must be >= 1"),
    ("simhash.near_duplicate_bits=65", "must be within 0..64"),
    ("dedup.minhash_permutations=0", "must be within 1..1024"),
    ("dedup.jaccard_threshold=1.2", "must be within 0..1"),
    ("dedup.length_ratio=-0.1", "must be within 0..1"),
    ("warc.gzip_level=10", "must be within 0..9"),
    ('warc.prefix="a/b"', "must be a name"),
    ('warc.operator="Ops\\r\\nWARC-Type: x"', "must be one line"),
    ("generate.top_n=0", "must be >= 1"),
    ("generate.discovery_share=-0.1", "must be within 0..1"),
    ("schedule.max_retries=0", "must be >= 1"),
    ("scope.score_decay=2", "must be within 0..1"),
    ("budget.max_pages_per_host=-1", "must be >= 0"),
    ("trap.max_new_share=1.01", "must be within 0..1"),
    ("trap.park_confidence=1.0", "must be within 0.5..1 (1 excluded)"),
    ("export.index_files=0", "must be >= 1"),
    ('export.cdxj_records=["responses"]', "element 'responses' must be one of"),
    ('spark.extra=["spark.ui.port"]', "element 'spark.ui.port' must be key=value"),
    ('spark.driver_memory="lots"', "must be a JVM memory size"),
    ("spark.local_max_failures=0", "must be >= 1"),
    ('storage.root=""', "must be non-empty"),
])
def test_bad_values_are_one_line_errors_naming_the_key(pair, words, tmp_path):
    key = pair.split("=", 1)[0]
    with pytest.raises(config.ConfigError) as e:
        config.load(overrides=[pair])
    message = str(e.value)
    assert f"configuration key {key}: " in message and words in message and "\n" not in message, message
    section, name = key.split(".")
    overlay = tmp_path / "c.toml"  # the same rule holds for a --conf file, which it names
    overlay.write_text(f"[{section}]\n{name} = {pair.split('=', 1)[1]}\n")
    with pytest.raises(config.ConfigError, match=re.escape(key)) as e:
        config.load([overlay])
    assert str(overlay) in str(e.value)
    with pytest.raises(config.ConfigError, match=re.escape(key)):  # and for keyword overrides
        config.defaults().with_overrides(pair)


@pytest.mark.parametrize("pair", [
    "politeness.host_delay_s=0", "robots.cache_ttl_s=86400", "fetch.max_redirect_hops=0",
    'net.allow_private_cidrs=["10.0.0.0/8", "127.10.0.1", "fd12::/16"]', "parse.max_link_density=1",
    "generate.discovery_share=0", "url.query_order=sort", "warc.gzip_level=0", "scope.max_depth=-1",
    "spark.driver_memory=512m", 'filter.deny_patterns=[]', "dedup.jaccard_threshold=1", "dedup.length_ratio=0",
    "dedup.minhash_permutations=1",
])
def test_values_at_the_edge_of_their_range_are_kept(pair):
    key, _, text = pair.partition("=")
    assert config.load(overrides=[pair]).get(key) == config._freeze(config._parse_value(text))


def test_relations_between_keys():
    with pytest.raises(config.ConfigError, match=r"politeness.backoff_base_s \(700.0\) must not exceed "
                                                 r"politeness.backoff_max_s \(600.0\)"):
        config.load(overrides=["politeness.backoff_base_s=700"])
    with pytest.raises(config.ConfigError, match="schedule.retry_base_s"):
        config.defaults().with_overrides(schedule__retry_max_s=10.0)
    assert config.load(overrides=["politeness.backoff_base_s=700", "politeness.backoff_max_s=700"])
    with pytest.raises(config.ConfigError, match=r"lease.heartbeat_s \(61.0\) must not exceed lease.ttl_s \(120.0\) / 2"):
        config.load(overrides=["lease.heartbeat_s=61"])
    assert config.load(overrides=["lease.heartbeat_s=60"])


def test_relations_hold_for_overlay_files_too(tmp_path):
    overlay = tmp_path / "c.toml"
    overlay.write_text("[schedule]\nretry_base_s = 7200.0\nretry_max_s = 3600.0\n")
    with pytest.raises(config.ConfigError, match="schedule.retry_base_s"):
        config.load([overlay])


def test_the_defaults_file_itself_is_checked(tmp_path, monkeypatch):
    """A bad value in conf/defaults.toml is refused too, not only one from --conf or --set."""
    text = config.DEFAULTS_PATH.read_text()
    assert "\nhost_delay_s = 1.0\n" in text
    bad = tmp_path / "defaults.toml"
    bad.write_text(text.replace("\nhost_delay_s = 1.0\n", "\nhost_delay_s = -1.0\n"))
    monkeypatch.setattr(config, "DEFAULTS_PATH", bad)
    with pytest.raises(config.ConfigError, match=r"politeness.host_delay_s: must be >= 0, got -1.0 \(from defaults.toml\)"):
        config.load()


@pytest.mark.parametrize("removed, replacement", sorted(config.REMOVED.items()))
def test_removed_keys_name_their_replacement(removed, replacement, tmp_path):
    keys = {k for k, _ in _keys_with_comment_flags()}
    assert removed not in keys and replacement in keys
    with pytest.raises(config.ConfigError) as e:
        config.load(overrides=[f"{removed}=1"])
    assert str(e.value).startswith(f"{removed} was removed: use {replacement} (from --set")
    section, name = removed.split(".")
    overlay = tmp_path / "old.toml"
    overlay.write_text(f"[{section}]\n{name} = 1\n")
    with pytest.raises(config.ConfigError, match=re.escape(f"{removed} was removed: use {replacement}")):
        config.load([overlay])


def test_no_library_reads_the_defaults_file_behind_its_callers_back():
    """Libraries take the section they need: a call to config.defaults() there would ignore --set."""
    root = config.DEFAULTS_PATH.parents[1]
    offenders = [str(p.relative_to(root)) for d in ("crawl_udfs", "jobs", "schemas") for p in (root / d).glob("*.py")
                 if "defaults()" in p.read_text() and p.name != "config.py"]
    assert offenders == []
