"""Store: SQLAlchemy models, sessions, migrations and queries (SQLite or PostgreSQL)."""
