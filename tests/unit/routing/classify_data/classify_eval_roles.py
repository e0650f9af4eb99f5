"""Message builders shared by the evaluation-data modules that ``make_classify_eval.py``
imports (run as a script, so they import each other by bare module name).

classify_eval_holdout3.py keeps its own copies: it was written blind as one self-contained
file, and the test suite imports it as a package module.
"""

from __future__ import annotations

from typing import Any

Body = dict[str, Any]


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def system(content: Any) -> dict[str, Any]:
    return {"role": "system", "content": content}
