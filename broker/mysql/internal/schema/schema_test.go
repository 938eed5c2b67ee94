package schema

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/txretry"
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

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want txretry.Kind
	}{
		{fmt.Errorf("wrapped: %w", &mysql.MySQLError{Number: 1213, Message: "Deadlock found"}), txretry.Conflict},
		{&mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}, txretry.Conflict},
		{&mysql.MySQLError{Number: 1020, Message: "Record has changed since last read"}, txretry.Conflict},
		{&mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}, txretry.Final},
		{fmt.Errorf("exec: %w", mysql.ErrInvalidConn), txretry.Unknown},
		{io.ErrUnexpectedEOF, txretry.Unknown},
		{driver.ErrBadConn, txretry.Conflict},
		{errors.New("sql: no rows"), txretry.Final},
	} {
		require.Equal(t, tc.want, Kind(tc.err), "%v", tc.err)
	}
}

func TestMigrateRefusesGaps(t *testing.T) {
	err := Migrate(t.Context(), nil, Target{Prefix: "p", Table: "t"}, []Step{{Version: 2}}, true)
	require.ErrorContains(t, err, "step 0 has version 2")
}
