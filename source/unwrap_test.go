package source

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestDeleteTombstone: a delete that the watch missed comes as a tombstone
// and still deletes; a tombstone of another type deletes nothing and is no
// event; every delete asks for a sync.
func TestDeleteTombstone(t *testing.T) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	for _, tt := range []struct {
		name string
		obj  any
		want []string
	}{
		{"object", svc, []string{"ns/web"}},
		{"tombstone", cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: svc}, []string{"ns/web"}},
		{"tombstone of a Node", cache.DeletedFinalStateUnknown{Key: "n1", Obj: &v1.Node{}}, nil},
		{"something else", "ns/web", nil},
	} {
		var deleted []string
		changes, events := 0, 0
		opts := Options{OnChange: func() { changes++ }, OnEvent: func(any) { events++ }}
		h := handler(opts, nil, func(s *v1.Service) { deleted = append(deleted, s.Namespace+"/"+s.Name) })
		h.OnDelete(tt.obj)
		if len(deleted) != len(tt.want) || len(deleted) > 0 && deleted[0] != tt.want[0] || changes != 1 || events != len(tt.want) {
			t.Errorf("%s: deleted %v, %d changes, %d events; want %v, 1 change, %d events", tt.name, deleted, changes, events, tt.want, len(tt.want))
		}
	}
}
