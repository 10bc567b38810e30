from liger_core.cli import main

raise SystemExit(main())
