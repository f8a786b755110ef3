"""`python -m forest_agent` runs the same CLI as the `forest-agent` console script."""

from forest_agent.cli import main

raise SystemExit(main())
