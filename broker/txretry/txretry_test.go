package txretry_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker/txretry"
)

// stateErr is a server error carrying an SQLSTATE, as pgx's and lib/pq's
// are.
type stateErr string

func (e stateErr) Error() string    { return "server: " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

// sendErr is a connection error that says whether anything was sent, as
// pgconn's are.
type sendErr bool

func (e sendErr) Error() string     { return "connection failed" }
func (e sendErr) SafeToRetry() bool { return bool(e) }

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want txretry.Kind
	}{
		{"nil", nil, txretry.Final},
		{"serialization failure", stateErr("40001"), txretry.Conflict},
		{"deadlock", fmt.Errorf("wrapped: %w", stateErr("40P01")), txretry.Conflict},
		{"lock timeout", stateErr("55P03"), txretry.Conflict},
		{"unique violation", stateErr("23505"), txretry.Final},
		{"statement completion unknown is a server answer", stateErr("08006"), txretry.Final},
		{"nothing sent", sendErr(true), txretry.Conflict},
		{"maybe sent", sendErr(false), txretry.Unknown},
		{"bad conn", driver.ErrBadConn, txretry.Conflict},
		{"net error", &net.OpError{Op: "read", Err: errors.New("reset")}, txretry.Unknown},
		{"unexpected EOF", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), txretry.Unknown},
		{"closed", net.ErrClosed, txretry.Unknown},
		{"canceled", context.Canceled, txretry.Unknown},
		{"deadline", context.DeadlineExceeded, txretry.Unknown},
		{"client side", errors.New("cannot encode"), txretry.Final},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, txretry.KindOf(tc.err))
		})
	}
	require.Equal(t, "conflict", txretry.Conflict.String())
	require.Equal(t, "Kind(9)", txretry.Kind(9).String())
}

func TestDo(t *testing.T) {
	conflict, final, unknown := stateErr("40P01"), stateErr("23505"), io.ErrUnexpectedEOF
	fast := &txretry.Options{MinBackoff: time.Microsecond, MaxBackoff: time.Microsecond}
	for _, tc := range []struct {
		name      string
		errs      []error // what successive attempts return; nil after the list
		opts      txretry.Options
		wantCalls int
		wantErr   error
		uncertain []bool // Attempt.Uncertain per call
	}{
		{name: "success at once", wantCalls: 1, uncertain: []bool{false}},
		{name: "conflicts then success", errs: []error{conflict, conflict}, wantCalls: 3},
		{name: "final at once", errs: []error{final, nil}, wantCalls: 1, wantErr: final},
		{name: "conflict then final", errs: []error{conflict, final}, wantCalls: 2, wantErr: final},
		{name: "unknown not retried by default", errs: []error{unknown}, wantCalls: 1, wantErr: unknown},
		{name: "unknown retried when asked", errs: []error{conflict, unknown, conflict}, opts: txretry.Options{RetryUnknown: true},
			wantCalls: 4, uncertain: []bool{false, false, true, true}},
		{name: "attempts bound", errs: []error{conflict, conflict, conflict, conflict}, opts: txretry.Options{Attempts: 3},
			wantCalls: 3, wantErr: conflict},
		{name: "default bound is ten", errs: []error{conflict, conflict, conflict, conflict, conflict, conflict, conflict, conflict, conflict, conflict, conflict},
			wantCalls: 10, wantErr: conflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.MinBackoff, o.MaxBackoff = fast.MinBackoff, fast.MaxBackoff
			var got []bool
			calls := 0
			err := txretry.Do(context.Background(), nil, func(_ context.Context, a txretry.Attempt) error {
				calls++
				require.Equal(t, calls, a.N)
				got = append(got, a.Uncertain)
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			}, &o)
			require.Equal(t, tc.wantCalls, calls)
			if tc.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.wantErr)
			}
			if tc.uncertain != nil {
				require.Equal(t, tc.uncertain, got)
			}
		})
	}
}

func TestDoHonoursContext(t *testing.T) {
	conflict := stateErr("40001")
	// Without a bound on attempts, only ctx ends the retries; its end
	// interrupts a pause.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	calls := 0
	err := txretry.Do(ctx, nil, func(context.Context, txretry.Attempt) error { calls++; return conflict },
		&txretry.Options{Attempts: -1, MinBackoff: time.Millisecond, MaxBackoff: time.Hour})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, conflict, "the last error is kept")
	require.Greater(t, calls, 1)
	require.Regexp(t, `gave up after \d+ attempts`, err.Error())

	// A custom classifier decides what is retried.
	calls = 0
	mine := errors.New("mine")
	err = txretry.Do(context.Background(), func(err error) txretry.Kind {
		if errors.Is(err, mine) {
			return txretry.Conflict
		}
		return txretry.Final
	}, func(context.Context, txretry.Attempt) error {
		calls++
		if calls < 3 {
			return mine
		}
		return nil
	}, &txretry.Options{MinBackoff: time.Microsecond})
	require.NoError(t, err)
	require.Equal(t, 3, calls)
}
