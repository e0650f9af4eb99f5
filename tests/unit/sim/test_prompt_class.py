import pytest

from proxy.sim.prompt_class import classify_prompt


@pytest.mark.parametrize(
    "text",
    [
        "Fix this:\n```python\nprint(1)\n```",
        "def add(a, b):\n    return a + b\n\nimport os\nclass A:\n    pass\n",
        "int main() {\n  int x = 1;\n  return x;\n}\n",
    ],
)
def test_code(text: str) -> None:
    assert classify_prompt(text) == "code"


@pytest.mark.parametrize(
    "text",
    [
        "Context: the report says revenue grew.\nQuestion: did it grow?",
        "[1] First retrieved passage.\n[2] Second one.\nAnswer using the sources.",
        "<document>some text</document> summarise",
    ],
)
def test_rag(text: str) -> None:
    assert classify_prompt(text) == "rag"


@pytest.mark.parametrize(
    "text",
    [
        "Hi! How are you today?",
        "Write a short poem about autumn leaves.",
        "",
        "Tell me more about the harbour. " * 200,  # long is not RAG
    ],
)
def test_chat(text: str) -> None:
    assert classify_prompt(text) == "chat"
