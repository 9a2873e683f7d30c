"""``python -m evalgate.lmeval``: lm-eval's own CLI with the ``evalgate`` model registered."""

from evalgate.lmeval.model import main

main()
