"""What every command shares with its user: the argument parser whose errors name the fix (cli.py), and the
console, progress and failure messages (progress.py)."""
