"""The old name of ``evalgate.gguf``, kept only while ``engines/llamacpp.py`` still imports it.

Delete this file when that import reads ``from evalgate.gguf import derived_gguf``.
"""

from evalgate.gguf import derived_gguf

__all__ = ["derived_gguf"]
