"""What every service process shares beside HTTP: typed configuration loading, CLI helpers,
key files, logging, child processes that die with their parent, the batch queue, polling rounds."""
