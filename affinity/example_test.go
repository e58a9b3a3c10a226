package affinity_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/affinity"
)

// A ClientIP Service with a ten-minute timeout, one with no timeout (the API
// default of three hours applies) and one whose timeout the API server would
// have refused.
func ExampleFromService() {
	for _, timeout := range []*int32{ptr[int32](600), nil, ptr[int32](100000)} {
		svc := &v1.Service{Spec: v1.ServiceSpec{SessionAffinity: v1.ServiceAffinityClientIP}}
		if timeout != nil {
			svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: timeout}}
		}
		p, err := affinity.FromService(svc)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Printf("%v: timeout %d s\n", p, p.Seconds())
	}
	// Output:
	// ClientIP(600s): timeout 600 s
	// ClientIP(10800s): timeout 10800 s
	// error: sessionAffinity timeout 100000 s is outside 1..86400
}
