"""The hostile-input tier (issue 36, docs/security.md): each test reproduces one finding of the
security audit as an attacker would send it, and asserts the hole stays closed."""
