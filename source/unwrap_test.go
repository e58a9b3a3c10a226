package source

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestDeleteTombstone: a delete that the watch missed comes as a tombstone
// and still deletes; a tombstone of another type deletes nothing; every
// delete asks for a sync.
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
		changes := 0
		h := handler(Options{OnChange: func() { changes++ }}, nil, func(s *v1.Service) { deleted = append(deleted, s.Namespace+"/"+s.Name) })
		h.OnDelete(tt.obj)
		if len(deleted) != len(tt.want) || len(deleted) > 0 && deleted[0] != tt.want[0] || changes != 1 {
			t.Errorf("%s: deleted %v, %d changes; want %v, 1 change", tt.name, deleted, changes, tt.want)
		}
	}
}
