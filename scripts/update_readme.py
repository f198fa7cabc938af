"""Put what ``minigrad demo`` prints into the README, between its demo markers.

    python scripts/update_readme.py        # `make readme`

The README's first screen shows the demo's real output from the same commit; the test
``tests/apps/test_cli.py::test_the_readme_shows_what_the_demo_prints`` checks that its
machine-independent columns (runs, losses, accuracies, verdicts) match a fresh run.
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
START, END = "<!-- demo:start -->", "<!-- demo:end -->"


def demo_output():
    done = subprocess.run([sys.executable, "-m", "minigrad", "demo", "--out", "build"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    lines = [line for line in done.stdout.splitlines() if not line.startswith("training: ")]
    return "\n".join(lines).strip()


def main():
    readme = ROOT / "README.md"
    text = readme.read_text()
    block = f"{START}\n```text\n$ make demo\n{demo_output()}\n```\n{END}"
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), flags=re.S)
    if not pattern.search(text):
        sys.exit(f"{readme} has no {START} ... {END} markers")
    readme.write_text(pattern.sub(lambda _: block, text))
    print(f"updated {readme}")


if __name__ == "__main__":
    main()
