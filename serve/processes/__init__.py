"""Local processes: pidfiles and process groups, the background server with its log and health wait, and the
supervisor that restarts it."""
