"""(placeholder: ops arrive in a later commit)."""
