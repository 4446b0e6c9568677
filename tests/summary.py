"""Lines tests want shown at the end of every run (conformance counts, measured rates)."""

LINES: list[str] = []


def note(line: str) -> None:
    print(line)
    LINES.append(line.strip())
