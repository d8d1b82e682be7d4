from gpuscale.cli import exit_as_module, main

exit_as_module(main())
