"""Prints the total and the N slowest tests of a ctest JUnit file (ctest --output-junit)."""
import sys
import xml.etree.ElementTree as ET


def main(path: str, count: int) -> None:
    cases = [(float(c.get("time", 0)), c.get("name"), c.get("status", "run"))
             for c in ET.parse(path).getroot().iter("testcase")]
    total = sum(t for t, _, _ in cases)
    print(f"== tests: {len(cases)}, {total:.0f} s of test time in all; the {count} slowest:")
    for seconds, name, status in sorted(cases, reverse=True)[:count]:
        print(f"   {seconds:7.1f} s  {name}" + ("" if status == "run" else f"  ({status})"))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
