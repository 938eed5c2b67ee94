package schema

import (
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
)

func TestCheckIdent(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"dead_lette", true},
		{"_x9", true},
		{"a", true},
		{"", false},
		{"9lives", false},
		{"Dead", false},
		{"dead-letters", false},
		{"a`b", false},
		{"a b", false},
		{"ünï", false},
		{"abcdefghij", true},
		{"abcdefghijk", false}, // over max
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckIdent("p", "table", tc.name, 10)
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, "`"+tc.name+"`", Quote(tc.name))
				return
			}
			require.ErrorIs(t, err, broker.ErrInvalidArgument)
			require.ErrorContains(t, err, "p: table")
		})
	}
}

func TestIsCode(t *testing.T) {
	deadlock := fmt.Errorf("wrapped: %w", &mysql.MySQLError{Number: 1213, Message: "Deadlock found"})
	require.True(t, IsCode(deadlock, 1205, 1213))
	require.False(t, IsCode(deadlock, 1205))
	require.False(t, IsCode(fmt.Errorf("plain"), 1213))
	require.False(t, IsCode(nil, 1213))
}

func TestMigrateRefusesGaps(t *testing.T) {
	err := Migrate(t.Context(), nil, Target{Prefix: "p", Table: "t"}, []Step{{Version: 2}}, true)
	require.ErrorContains(t, err, "step 0 has version 2")
}
