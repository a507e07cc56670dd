"""Runs documentation blocks as a reader pastes them: in order, in one namespace, in this process.

Reads ``[[label, code], ...]`` as JSON on standard input, prints ``ran <label>`` after each
block, and on the first failure prints ``FAILED <label>`` and the traceback, then exits 1.
Started by ``test_doc_snippets.py`` in a fresh interpreter, in an empty folder, with no API key.
"""

import json
import sys
import traceback


def main() -> int:
    namespace: dict = {"__name__": "__main__"}
    for label, code in json.load(sys.stdin):
        try:
            exec(compile(code, label, "exec"), namespace)
        except BaseException:
            print(f"FAILED {label}", flush=True)
            traceback.print_exc(file=sys.stdout)
            return 1
        print(f"ran {label}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
