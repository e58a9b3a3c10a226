package affinity_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/affinity"
)

func ptr[T any](v T) *T { return &v }

// svc is a Service with the given session affinity and, when timeout is not
// nil, a ClientIP timeout.
func svc(typ v1.ServiceAffinity, timeout *int32) *v1.Service {
	s := &v1.Service{Spec: v1.ServiceSpec{SessionAffinity: typ}}
	if timeout != nil {
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: timeout}}
	}
	return s
}

// want is what a Policy reports.
type want struct {
	Enabled bool
	Seconds int32
	String  string
}

func describe(p affinity.Policy) want {
	return want{p.Enabled(), p.Seconds(), p.String()}
}

var none = want{false, 0, "None"}

func TestFromService(t *testing.T) {
	tests := []struct {
		name    string
		svc     *v1.Service
		want    want
		wantErr string
	}{
		{"empty type", svc("", nil), none, ""},
		{"None", svc(v1.ServiceAffinityNone, nil), none, ""},
		{"None ignores a ClientIP config", svc(v1.ServiceAffinityNone, ptr[int32](60)), none, ""},
		{"ClientIP without config: default", svc(v1.ServiceAffinityClientIP, nil), want{true, 10800, "ClientIP(10800s)"}, ""},
		{
			"ClientIP with empty config: default",
			&v1.Service{Spec: v1.ServiceSpec{SessionAffinity: v1.ServiceAffinityClientIP, SessionAffinityConfig: &v1.SessionAffinityConfig{}}},
			want{true, 10800, "ClientIP(10800s)"}, "",
		},
		{
			"ClientIP with config but no timeout: default",
			&v1.Service{Spec: v1.ServiceSpec{SessionAffinity: v1.ServiceAffinityClientIP, SessionAffinityConfig: &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{}}}},
			want{true, 10800, "ClientIP(10800s)"}, "",
		},
		{"ClientIP explicit default", svc(v1.ServiceAffinityClientIP, ptr[int32](10800)), want{true, 10800, "ClientIP(10800s)"}, ""},
		{"ClientIP 1 s", svc(v1.ServiceAffinityClientIP, ptr[int32](1)), want{true, 1, "ClientIP(1s)"}, ""},
		{"ClientIP 600 s", svc(v1.ServiceAffinityClientIP, ptr[int32](600)), want{true, 600, "ClientIP(600s)"}, ""},
		{"ClientIP maximum", svc(v1.ServiceAffinityClientIP, ptr[int32](86400)), want{true, 86400, "ClientIP(86400s)"}, ""},
		{"ClientIP 0", svc(v1.ServiceAffinityClientIP, ptr[int32](0)), none, "sessionAffinity timeout 0 s is outside 1..86400"},
		{"ClientIP -1", svc(v1.ServiceAffinityClientIP, ptr[int32](-1)), none, "sessionAffinity timeout -1 s is outside 1..86400"},
		{"ClientIP above the maximum", svc(v1.ServiceAffinityClientIP, ptr[int32](86401)), none, "sessionAffinity timeout 86401 s is outside 1..86400"},
		{"unknown type", svc("Cookie", nil), none, `unknown sessionAffinity "Cookie"`},
		{"type is case-sensitive", svc("clientip", ptr[int32](60)), none, `unknown sessionAffinity "clientip"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := affinity.FromService(tt.svc)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("FromService: %v", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Fatalf("FromService error = %v, want %q", err, tt.wantErr)
			}
			if got := describe(p); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if tt.wantErr != "" && p != (affinity.Policy{}) {
				t.Errorf("on error got %v, want the zero Policy", p)
			}
		})
	}
}

func TestClientIP(t *testing.T) {
	tests := []struct {
		seconds int32
		want    want
		wantErr bool
	}{
		{1, want{true, 1, "ClientIP(1s)"}, false},
		{affinity.DefaultTimeoutSeconds, want{true, 10800, "ClientIP(10800s)"}, false},
		{affinity.MaxTimeoutSeconds, want{true, 86400, "ClientIP(86400s)"}, false},
		{0, none, true},
		{-1, none, true},
		{-2147483648, none, true},
		{affinity.MaxTimeoutSeconds + 1, none, true},
		{2147483647, none, true},
	}
	for _, tt := range tests {
		p, err := affinity.ClientIP(tt.seconds)
		if (err != nil) != tt.wantErr {
			t.Errorf("ClientIP(%d) error = %v, want error %v", tt.seconds, err, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "outside 1..86400") {
			t.Errorf("ClientIP(%d) error = %q, want it to name the range", tt.seconds, err)
		}
		if got := describe(p); got != tt.want {
			t.Errorf("ClientIP(%d) = %+v, want %+v", tt.seconds, got, tt.want)
		}
	}
}

func TestZeroPolicy(t *testing.T) {
	if got := describe(affinity.Policy{}); got != none {
		t.Errorf("zero Policy: %+v, want %+v", got, none)
	}
}

// Policies compare with ==: the same timeout gives equal Policies, whichever
// way they were made.
func TestPolicyEquality(t *testing.T) {
	a, err := affinity.FromService(svc(v1.ServiceAffinityClientIP, nil))
	if err != nil {
		t.Fatal(err)
	}
	b, err := affinity.ClientIP(affinity.DefaultTimeoutSeconds)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := affinity.ClientIP(600)
	if a != b {
		t.Errorf("%v != %v", a, b)
	}
	if a == c {
		t.Errorf("%v == %v", a, c)
	}
	if n, _ := affinity.FromService(svc(v1.ServiceAffinityNone, nil)); n != (affinity.Policy{}) {
		t.Errorf("None gives %v, want the zero Policy", n)
	}
}

func TestConstants(t *testing.T) {
	if affinity.DefaultTimeoutSeconds != v1.DefaultClientIPServiceAffinitySeconds {
		t.Errorf("DefaultTimeoutSeconds = %d, want v1.DefaultClientIPServiceAffinitySeconds %d", affinity.DefaultTimeoutSeconds, v1.DefaultClientIPServiceAffinitySeconds)
	}
	// The API server's validation caps the timeout at one day.
	if affinity.MaxTimeoutSeconds != 24*60*60 {
		t.Errorf("MaxTimeoutSeconds = %d, want 86400", affinity.MaxTimeoutSeconds)
	}
}
