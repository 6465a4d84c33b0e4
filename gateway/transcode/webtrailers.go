package transcode

import (
	"bytes"
	"encoding/binary"
	"net/http"
)

// LowerWebTrailers wraps the writer of a gRPC-Web answer so that the keys
// of its trailer frame are lower case, as the gRPC-Web protocol asks:
// vanguard writes them as Go canonicalises header names. Message frames
// pass through untouched; the trailer frame keeps its length.
func LowerWebTrailers(w http.ResponseWriter) http.ResponseWriter {
	return &webTrailerWriter{ResponseWriter: w}
}

type webTrailerWriter struct {
	http.ResponseWriter
	hdr       [5]byte
	hn        int    // bytes of the current frame's prefix seen
	remaining int    // bytes of the current frame's payload to come
	trailer   bool   // the current frame is the trailer frame
	tbuf      []byte // the trailer frame's payload so far
}

func (t *webTrailerWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if t.remaining == 0 && t.hn < 5 {
			c := copy(t.hdr[t.hn:], p)
			t.hn += c
			p = p[c:]
			if t.hn < 5 {
				break
			}
			t.remaining = int(binary.BigEndian.Uint32(t.hdr[1:]))
			t.trailer = t.hdr[0]&0x80 != 0
			if !t.trailer {
				if _, err := t.ResponseWriter.Write(t.hdr[:]); err != nil {
					return 0, err
				}
			}
			if t.remaining == 0 {
				if err := t.endFrame(); err != nil {
					return 0, err
				}
			}
			continue
		}
		c := min(t.remaining, len(p))
		if t.trailer {
			t.tbuf = append(t.tbuf, p[:c]...)
		} else if _, err := t.ResponseWriter.Write(p[:c]); err != nil {
			return 0, err
		}
		t.remaining -= c
		p = p[c:]
		if t.remaining == 0 {
			if err := t.endFrame(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// endFrame finishes the current frame: a trailer frame goes out now, its
// keys lower-cased.
func (t *webTrailerWriter) endFrame() error {
	t.hn = 0
	if !t.trailer {
		return nil
	}
	lines := bytes.Split(t.tbuf, []byte("\r\n"))
	for _, l := range lines {
		if i := bytes.IndexByte(l, ':'); i > 0 {
			copy(l[:i], bytes.ToLower(l[:i]))
		}
	}
	if _, err := t.ResponseWriter.Write(t.hdr[:]); err != nil {
		return err
	}
	_, err := t.ResponseWriter.Write(t.tbuf)
	t.tbuf, t.trailer = t.tbuf[:0], false
	return err
}

func (t *webTrailerWriter) Flush() { _ = http.NewResponseController(t.ResponseWriter).Flush() }

func (t *webTrailerWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
