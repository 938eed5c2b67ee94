package mysql

import (
	"context"

	"github.com/geodlq/geodlq/broker"
)

// CompactForTest folds the store's count log into its counts.
func CompactForTest(ctx context.Context, s *broker.Store) error {
	return s.Driver().(*driver).compact(ctx)
}
