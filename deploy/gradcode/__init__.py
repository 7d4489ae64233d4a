"""Training runtimes for gradient codes: the dataset and models (numpy), the worker/master
protocol shared by both backends, the simulated-time backend and the Ray backend."""
