package transcode

import (
	"encoding/binary"
	"io"
)

// endFrames walks an enveloped body (gRPC-Web, Connect streaming) as it
// is written: frames of a five-byte prefix (flags, then the payload's
// big-endian length) and a payload. Message frames pass through as they
// come, in as many writes as they were given; the frame whose flags have
// the end bit (gRPC-Web's trailers, Connect's end of stream) is held
// whole and written as rewrite returns it, under a prefix with its new
// length. Only that frame is ever copied.
type endFrames struct {
	end     byte                // the flag bit of the end frame; 0: no walk
	rewrite func([]byte) []byte // may rewrite its argument in place

	hdr       [5]byte
	hn        int    // bytes of the current frame's prefix seen
	remaining int    // bytes of the current frame's payload to come
	inEnd     bool   // the current frame is the end frame
	buf       []byte // the end frame's payload so far
	small     [128]byte
}

func (f *endFrames) reset(end byte, rewrite func([]byte) []byte) {
	*f = endFrames{end: end, rewrite: rewrite}
}

func (f *endFrames) write(w io.Writer, p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if f.remaining == 0 && f.hn < 5 {
			c := copy(f.hdr[f.hn:], p)
			f.hn += c
			p = p[c:]
			if f.hn < 5 {
				break
			}
			f.remaining = int(binary.BigEndian.Uint32(f.hdr[1:]))
			f.inEnd = f.hdr[0]&f.end != 0
			if f.inEnd {
				f.buf = f.small[:0]
			} else if _, err := w.Write(f.hdr[:]); err != nil {
				return 0, err
			}
			if f.remaining == 0 {
				if err := f.endFrame(w); err != nil {
					return 0, err
				}
			}
			continue
		}
		c := min(f.remaining, len(p))
		if f.inEnd {
			f.buf = append(f.buf, p[:c]...)
		} else if _, err := w.Write(p[:c]); err != nil {
			return 0, err
		}
		f.remaining -= c
		p = p[c:]
		if f.remaining == 0 {
			if err := f.endFrame(w); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// endFrame finishes the current frame: the end frame goes out now,
// rewritten.
func (f *endFrames) endFrame(w io.Writer) error {
	f.hn = 0
	if !f.inEnd {
		return nil
	}
	f.inEnd = false
	out := f.rewrite(f.buf)
	binary.BigEndian.PutUint32(f.hdr[1:], uint32(len(out)))
	if _, err := w.Write(f.hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(out)
	return err
}
