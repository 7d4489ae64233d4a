"""The application on top of the kernel, formulations and solvers: studies of the three systems,
the bench and its report, figures, and the command line."""
