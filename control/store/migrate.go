package store

import "context"

// SchemaVersion returns the number of schema steps applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	return s.db.SchemaVersion(ctx, "schema_migrations")
}
