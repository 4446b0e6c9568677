"""Load Google's robots.txt conformance suite (robotstxt-spec-test) from its textproto files.

The schema (package ``specification``, proto2) is built in code from a
``FileDescriptorProto`` so that no ``protoc`` and no generated module is needed;
``text_format.Parse`` then reads each file. See ``shared/testdata/README.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

SUITE_DIR = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "robotstxt-spec-test" / "CTC"

_F = descriptor_pb2.FieldDescriptorProto


@dataclass(frozen=True)
class Case:
    """One expectation of the suite, flattened with its robots.txt body."""

    file: str            # e.g. "stress/369883.textproto"
    robotstxt: bytes
    testurl: str
    useragent: str
    expected_allowed: bool
    google_specific: bool

    @property
    def id(self) -> str:
        return f"{self.file}:{self.useragent}:{self.testurl}"


def _field(msg, name: str, number: int, ftype: int, label: int = _F.LABEL_OPTIONAL, type_name: str = "") -> None:
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name


@lru_cache(maxsize=1)
def _spec_class():
    fdp = descriptor_pb2.FileDescriptorProto(name="specification.proto", package="specification", syntax="proto2")
    outcome = fdp.enum_type.add(name="Outcome")
    for i, n in enumerate(("UNSPECIFIED", "ALLOWED", "DISALLOWED")):
        outcome.value.add(name=n, number=i)
    ttype = fdp.enum_type.add(name="TestType")
    for i, n in enumerate(("STANDARD", "GOOGLE_SPECIFIC")):
        ttype.value.add(name=n, number=i)
    exp = fdp.message_type.add(name="Expectation")
    _field(exp, "testurl", 1, _F.TYPE_STRING)
    _field(exp, "useragent", 2, _F.TYPE_STRING)
    _field(exp, "expected_outcome", 3, _F.TYPE_ENUM, type_name=".specification.Outcome")
    _field(exp, "additional_explanation", 4, _F.TYPE_BYTES)
    _field(exp, "test_type", 5, _F.TYPE_ENUM, type_name=".specification.TestType")
    test = fdp.message_type.add(name="RobotsTxtTest")
    _field(test, "robotstxt", 1, _F.TYPE_BYTES)
    _field(test, "test_expectations", 2, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".specification.Expectation")
    spec = fdp.message_type.add(name="RobotsTxtSpecification")
    _field(spec, "tests", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".specification.RobotsTxtTest")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("specification.RobotsTxtSpecification"))


def load_cases(suite_dir: Path = SUITE_DIR) -> list[Case]:
    """Every expectation of every ``*.textproto`` under ``suite_dir``, in a stable order."""
    cls = _spec_class()
    allowed_value = cls.DESCRIPTOR.file.enum_types_by_name["Outcome"].values_by_name["ALLOWED"].number
    google_value = cls.DESCRIPTOR.file.enum_types_by_name["TestType"].values_by_name["GOOGLE_SPECIFIC"].number
    cases: list[Case] = []
    for path in sorted(suite_dir.glob("*/*.textproto")):
        spec = cls()
        text_format.Parse(path.read_text(encoding="utf-8"), spec)
        rel = path.relative_to(suite_dir).as_posix()
        for test in spec.tests:
            for e in test.test_expectations:
                cases.append(
                    Case(
                        file=rel,
                        robotstxt=bytes(test.robotstxt),
                        testurl=e.testurl,
                        useragent=e.useragent,
                        expected_allowed=e.expected_outcome == allowed_value,
                        google_specific=e.test_type == google_value,
                    )
                )
    return cases
