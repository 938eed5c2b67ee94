package console

import (
	"errors"

	"github.com/geodlq/geodlq/offload"
)

// BlobsHint says, for an error of reading an offloaded blob, how to point
// the command at blobs written under another base URI: an envelope's
// offload URI that the configured blob store refuses names --blobs-base
// (with the base the URI is under, when it shows one). "" for other
// errors. A file:// URI of a blob directory that moved needs no hint: the
// blob store reads it (offload.Offloader.Resolve).
func BlobsHint(err error) string {
	var ue *offload.URIError
	switch {
	case errors.As(err, &ue) && ue.Base != "":
		return "the blobs were written under " + ue.Base + ": pass --blobs-base " + ue.Base + " (with --blobs naming where they are now)"
	case errors.Is(err, offload.ErrForbiddenURI):
		return "if the blobs were written under another base URI, pass it as --blobs-base (and their prefix as --blobs-prefix)"
	}
	return ""
}

// withBlobsHint appends BlobsHint(err) to msg, when there is one.
func withBlobsHint(msg string, err error) string {
	if h := BlobsHint(err); h != "" {
		return msg + "; " + h
	}
	return msg
}
