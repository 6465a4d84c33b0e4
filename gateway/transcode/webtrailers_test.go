package transcode_test

import (
	"bytes"
	"encoding/binary"
	"net/http/httptest"
	"testing"

	"github.com/portico-gw/portico/gateway/transcode"
)

func frame(flag byte, payload string) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = flag
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// TestLowerWebTrailers: however the answer is cut into writes, message
// frames pass as they are and the trailer frame's keys come out lower case.
func TestLowerWebTrailers(t *testing.T) {
	t.Parallel()
	in := append(append(frame(0, "Hello: Message"), frame(0, "")...), frame(0x80, "Grpc-Status: 0\r\nX-Custom-Trailer: A-Value\r\n")...)
	want := append(append(frame(0, "Hello: Message"), frame(0, "")...), frame(0x80, "grpc-status: 0\r\nx-custom-trailer: A-Value\r\n")...)
	for _, size := range []int{1, 2, 3, 5, 7, len(in)} {
		rec := httptest.NewRecorder()
		w := transcode.LowerWebTrailers(rec)
		for p := in; len(p) > 0; {
			n := min(size, len(p))
			if m, err := w.Write(p[:n]); err != nil || m != n {
				t.Fatalf("write %d: %d, %v", n, m, err)
			}
			p = p[n:]
		}
		if got := rec.Body.Bytes(); !bytes.Equal(got, want) {
			t.Errorf("writes of %d: %q, want %q", size, got, want)
		}
	}
}
