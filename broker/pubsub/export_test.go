package pubsub

// Test hooks.
var SourceOf = sourceOf
