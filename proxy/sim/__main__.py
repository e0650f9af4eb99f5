from proxy.sim.cli import main

raise SystemExit(main())
