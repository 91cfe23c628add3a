package libvirt

import (
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/digitalocean/go-libvirt/socket"
	"github.com/google/go-cmp/cmp"
)

func packet(typ, serial uint32, payload string) []byte {
	b := make([]byte, pktHeaderLen+len(payload))
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)))
	binary.BigEndian.PutUint32(b[offType:], typ)
	binary.BigEndian.PutUint32(b[offSerial:], serial)
	copy(b[pktHeaderLen:], payload)
	return b
}

func TestReorderConn(t *testing.T) {
	server, client := net.Pipe()
	var in []byte
	for _, p := range [][]byte{
		packet(socket.Stream, 7, "data"),   // overtook its reply
		packet(socket.Reply, 6, "other"),   // another call's reply passes
		packet(socket.Stream, 7, ""),       // end of stream, still early
		packet(socket.Message, 0, "event"), // events pass
		packet(socket.Reply, 7, ""),        // the reply releases the stream
		packet(socket.Stream, 7, "late"),   // after the reply: in order
	} {
		in = append(in, p...)
	}
	go func() {
		// Odd-sized writes: packets arrive split.
		for off := 0; off < len(in); off += 5 {
			_, _ = server.Write(in[off:min(off+5, len(in))])
		}
		_ = server.Close()
	}()
	got, err := io.ReadAll(newReorderConn(client))
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	var want []byte
	for _, p := range [][]byte{
		packet(socket.Reply, 6, "other"),
		packet(socket.Message, 0, "event"),
		packet(socket.Reply, 7, ""),
		packet(socket.Stream, 7, "data"),
		packet(socket.Stream, 7, ""),
		packet(socket.Stream, 7, "late"),
	} {
		want = append(want, p...)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reordered stream: -want +got:\n%s", diff)
	}
}
