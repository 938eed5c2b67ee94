package envelope

// DecodeFastPath is the fast path of DecodeFast alone, for the tests: ok
// tells whether it took the document or would hand it to Decode.
var DecodeFastPath = decodeFast
