"""Prompt classification: rag | code | chat (plus policy-defined labels), with its reasons.

RAG and code requests produce output that copies from the prompt, which is where n-gram
speculation pays; chat is everything else.
"""

from proxy.policy.classifier import BUILTIN_LABELS, ClassifierConfig, ClassRule, Label
from proxy.routing.classify.classifier import OVERRIDE_HEADER, Classification, Classifier

__all__ = [
    "BUILTIN_LABELS",
    "OVERRIDE_HEADER",
    "ClassRule",
    "Classification",
    "Classifier",
    "ClassifierConfig",
    "Label",
]
