package faultnet_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/faultnet"
)

func TestLoser(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					got <- string(buf[:n])
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	l := &faultnet.Loser{Settle: time.Millisecond}
	c, err := l.DialContext(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	buf := make([]byte, 2)
	_, err = c.Write([]byte("COMMIT"))
	require.NoError(t, err)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err, "not armed: the answer arrives")
	require.Equal(t, "COMMIT", <-got)

	l.Arm("COMMIT")
	_, err = c.Write([]byte("SELECT"))
	require.NoError(t, err)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err, "another request is answered")
	<-got
	_, err = c.Write([]byte("COMMIT"))
	require.NoError(t, err)
	require.Equal(t, "COMMIT", <-got, "the server received the request")
	_, err = c.Read(buf)
	require.ErrorIs(t, err, faultnet.ErrInjected)
	var ne net.Error
	require.True(t, errors.As(err, &ne))
	require.Equal(t, 1, l.Fired())
}
