from gpuscale.cli import main

raise SystemExit(main())
