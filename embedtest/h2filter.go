package embedtest

// h2Preface is the client connection preface of HTTP/2 (RFC 9113, 3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// HTTP/2 frame types the filter reads.
const (
	h2Headers   = 0x1
	h2RSTStream = 0x3
	h2GoAway    = 0x7
)

// h2filter follows the frames of a plain-text HTTP/2 client connection (gRPC
// without TLS) so that the requests a client sent during a Hold reach the
// member as requests, not as requests already canceled: it drops the
// RST_STREAM frames of every stream whose HEADERS were held, and every
// GOAWAY once some stream was held, whenever they come. (A client that gives
// up during a Hold may write its reset after Restore: the caller's context
// ends before the client's writer sends the frame.) Held bytes of other
// streams' resets are dropped too. A connection that does not start with the
// HTTP/2 preface (TLS) passes unchanged.
type h2filter struct {
	off  int  // bytes of the preface seen
	raw  bool // not plain-text HTTP/2: pass everything
	hdr  [9]byte
	nhdr int  // bytes of the current frame header seen
	left int  // bytes of the current frame's payload still to come
	drop bool // the current frame is dropped

	held map[uint32]bool // streams whose HEADERS were held
}

// filter returns what of b to forward; late says b was held by a Hold.
func (f *h2filter) filter(b []byte, late bool) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		switch {
		case f.raw:
			return append(out, b[i:]...)
		case f.off < len(h2Preface):
			if b[i] != h2Preface[f.off] {
				f.raw = true
				continue
			}
			out = append(out, b[i])
			f.off++
			i++
		case f.left > 0:
			k := min(f.left, len(b)-i)
			if !f.drop {
				out = append(out, b[i:i+k]...)
			}
			f.left -= k
			i += k
		default:
			f.hdr[f.nhdr] = b[i]
			f.nhdr++
			i++
			if f.nhdr < len(f.hdr) {
				continue
			}
			f.nhdr = 0
			f.left = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
			f.drop = f.frameDropped(late)
			if !f.drop {
				out = append(out, f.hdr[:]...)
			}
		}
	}
	return out
}

// frameDropped decides on the frame whose header is f.hdr.
func (f *h2filter) frameDropped(late bool) bool {
	stream := (uint32(f.hdr[5])<<24 | uint32(f.hdr[6])<<16 | uint32(f.hdr[7])<<8 | uint32(f.hdr[8])) &^ (1 << 31)
	switch f.hdr[3] {
	case h2Headers:
		if late {
			if f.held == nil {
				f.held = make(map[uint32]bool)
			}
			f.held[stream] = true
		}
	case h2RSTStream:
		return late || f.held[stream]
	case h2GoAway:
		return late || len(f.held) > 0
	}
	return false
}
