from blackwell_doctor.cli import main

raise SystemExit(main())
