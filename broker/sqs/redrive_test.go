package sqs_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	geosqs "github.com/geodlq/geodlq/broker/sqs"
)

func TestRedriveSettings(t *testing.T) {
	const dlq = "arn:aws:sqs:us-east-1:123456789012:vector-dlq"
	cases := []struct {
		name     string
		cfg      geosqs.RedriveConfig
		wantErr  error
		wantMRC  int
		wantVT   time.Duration
		wantWarn string
	}{
		{"defaults", geosqs.RedriveConfig{DeadLetterTargetARN: dlq}, nil, 4, 30 * time.Second, ""},
		{"seed example", geosqs.RedriveConfig{SourceQueue: "vector-jobs", DeadLetterTargetARN: dlq, MaxReceiveCount: 4, LongestOperation: 12 * time.Second}, nil, 4, 72 * time.Second, ""},
		{"3 is fine", geosqs.RedriveConfig{DeadLetterTargetARN: dlq, MaxReceiveCount: 3}, nil, 3, 30 * time.Second, ""},
		{"5 is fine", geosqs.RedriveConfig{DeadLetterTargetARN: dlq, MaxReceiveCount: 5}, nil, 5, 30 * time.Second, ""},
		{"1 warns", geosqs.RedriveConfig{DeadLetterTargetARN: dlq, MaxReceiveCount: 1}, nil, 1, 30 * time.Second, "below the recommended 3..5"},
		{"6 warns", geosqs.RedriveConfig{DeadLetterTargetARN: dlq, MaxReceiveCount: 6}, nil, 6, 30 * time.Second, "above the recommended 3..5"},
		{"1000 warns", geosqs.RedriveConfig{DeadLetterTargetARN: dlq, MaxReceiveCount: 1000}, nil, 1000, 30 * time.Second, "above"},
		{"1001 refused", geosqs.RedriveConfig{DeadLetterTargetARN: dlq, MaxReceiveCount: 1001}, geosqs.ErrInvalidRedrive, 0, 0, ""},
		{"negative refused", geosqs.RedriveConfig{DeadLetterTargetARN: dlq, MaxReceiveCount: -1}, geosqs.ErrInvalidRedrive, 0, 0, ""},
		{"no target", geosqs.RedriveConfig{MaxReceiveCount: 4}, geosqs.ErrInvalidRedrive, 0, 0, ""},
		{"FIFO source, standard DLQ", geosqs.RedriveConfig{SourceQueue: "https://sqs.us-east-1.amazonaws.com/1/jobs.fifo", DeadLetterTargetARN: dlq}, geosqs.ErrFIFOMismatch, 0, 0, ""},
		{"standard source, FIFO DLQ", geosqs.RedriveConfig{SourceQueue: "jobs", DeadLetterTargetARN: dlq + ".fifo"}, geosqs.ErrFIFOMismatch, 0, 0, ""},
		{"FIFO pair", geosqs.RedriveConfig{SourceQueue: "jobs.fifo", DeadLetterTargetARN: dlq + ".fifo"}, nil, 4, 30 * time.Second, ""},
		{"long operation capped", geosqs.RedriveConfig{DeadLetterTargetARN: dlq, LongestOperation: 3 * time.Hour}, nil, 4, 12 * time.Hour, "capped at 12h"},
		{"operation beyond 12h", geosqs.RedriveConfig{DeadLetterTargetARN: dlq, LongestOperation: 13 * time.Hour}, geosqs.ErrInvalidRedrive, 0, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			tc.cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			s, err := tc.cfg.Settings()
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantMRC, s.RedrivePolicy.MaxReceiveCount)
			require.Equal(t, tc.wantVT, s.VisibilityTimeout)
			if tc.wantWarn == "" {
				require.Empty(t, s.Warnings)
				require.Empty(t, logs.String())
				return
			}
			require.NotEmpty(t, s.Warnings)
			require.Contains(t, s.Warnings[0], tc.wantWarn)
			require.Contains(t, logs.String(), "level=WARN")
			require.Contains(t, logs.String(), tc.wantWarn)
		})
	}
	var mrc *geosqs.MaxReceiveCountError
	_, err := geosqs.RedriveConfig{DeadLetterTargetARN: dlq, MaxReceiveCount: 0x7fff}.Settings()
	require.ErrorAs(t, err, &mrc)
	require.Equal(t, 0x7fff, mrc.Value)
}

func TestVisibilityTimeoutFor(t *testing.T) {
	for _, tc := range []struct {
		longest, want time.Duration
	}{
		{0, 30 * time.Second}, {-time.Second, 30 * time.Second}, {time.Second, 30 * time.Second},
		{5 * time.Second, 30 * time.Second}, {12 * time.Second, 72 * time.Second},
		{8500 * time.Millisecond, 51 * time.Second}, {10 * time.Minute, time.Hour},
		{2 * time.Hour, 12 * time.Hour}, {11*time.Hour + 59*time.Minute, 12 * time.Hour},
	} {
		got, err := geosqs.VisibilityTimeoutFor(tc.longest)
		require.NoError(t, err, "%v", tc.longest)
		require.Equal(t, tc.want, got, "%v", tc.longest)
	}
	_, err := geosqs.VisibilityTimeoutFor(12 * time.Hour)
	var vte *geosqs.VisibilityTimeoutError
	require.ErrorAs(t, err, &vte)
}

func TestParseRedrivePolicy(t *testing.T) {
	for _, raw := range []string{
		`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:d","maxReceiveCount":"4"}`,
		`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:d","maxReceiveCount":4}`,
	} {
		p, err := geosqs.ParseRedrivePolicy(raw)
		require.NoError(t, err)
		require.Equal(t, geosqs.RedrivePolicy{DeadLetterTargetARN: "arn:aws:sqs:us-east-1:1:d", MaxReceiveCount: 4}, p)
		back, err := geosqs.ParseRedrivePolicy(p.String())
		require.NoError(t, err)
		require.Equal(t, p, back)
	}
	for _, bad := range []string{``, `{}`, `{"deadLetterTargetArn":"a","maxReceiveCount":"x"}`, `{"maxReceiveCount":3}`} {
		_, err := geosqs.ParseRedrivePolicy(bad)
		require.Error(t, err, bad)
	}
}

// TestRedriveApplyAndCheck applies the settings to a queue on the SQS test
// server (which validates RedrivePolicy as SQS does) and checks them back.
func TestRedriveApplyAndCheck(t *testing.T) {
	client := newClient(t)
	_, dlqARN := createQueue(t, client, queueName(t, "-dlq"), nil)
	src, _ := createQueue(t, client, queueName(t, "-src"), nil)
	s, err := geosqs.RedriveConfig{DeadLetterTargetARN: dlqARN, MaxReceiveCount: 5, LongestOperation: 10 * time.Second}.Settings()
	require.NoError(t, err)
	err = s.Check(context.Background(), client, src)
	require.ErrorContains(t, err, "has no RedrivePolicy")
	require.NoError(t, s.Apply(context.Background(), client, src))
	require.NoError(t, s.Check(context.Background(), client, src), "the queue has what the helper asked for")
	other := s
	other.RedrivePolicy.MaxReceiveCount = 3
	other.VisibilityTimeout = 90 * time.Second
	err = other.Check(context.Background(), client, src)
	require.ErrorContains(t, err, "want {")
	require.ErrorContains(t, err, "VisibilityTimeout 60s, want 90")
	require.Contains(t, s.CLI(src), "aws sqs set-queue-attributes")
}
