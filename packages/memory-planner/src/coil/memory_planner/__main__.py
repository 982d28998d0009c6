"""``python -m coil.memory_planner``: see :mod:`coil.memory_planner.cli`."""

from coil.memory_planner.cli import main

raise SystemExit(main())
