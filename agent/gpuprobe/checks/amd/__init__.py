"""AMD's rules: AMD's part of the vendor-neutral checks."""
