package conntrack_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/svcproxy/svcproxy/conntrack"
)

// statHeader is the header of /proc/net/stat/nf_conntrack on Linux 6.18.
const statHeader = "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart\n"

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    []conntrack.CPUStats
		wantErr string
	}{
		{
			name: "Linux 6.18, two CPUs",
			data: statHeader +
				"0000004a  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000003 00000001 00000000 00000000  00000000 00000000 00000000 00000000\n" +
				"0000004a  00000002 00000000 00000000 00000000 00000000 00000000 00000000 00000000 0000001f 00000000 0000000a 00000000  00000000 00000000 00000000 00000000\n",
			want: []conntrack.CPUStats{{InsertFailed: 3, Drop: 1}, {InsertFailed: 31, EarlyDrop: 10}},
		},
		{
			name: "columns found by name, in any order",
			data: "entries early_drop searched drop insert_failed\n" +
				"00000001 ffffffff 00000000 00000002 00000010\n",
			want: []conntrack.CPUStats{{InsertFailed: 16, Drop: 2, EarlyDrop: 0xffffffff}},
		},
		{name: "empty", data: "", wantErr: "empty"},
		{name: "no CPU lines", data: statHeader, wantErr: "no CPU lines"},
		{name: "missing column", data: "entries drop early_drop\n00000001 00000000 00000000\n", wantErr: `no "insert_failed" column`},
		{name: "short line", data: "entries insert_failed drop early_drop\n00000001 00000000 00000000\n", wantErr: "3 columns, header has 4"},
		{name: "not hex", data: "entries insert_failed drop early_drop\n00000001 0000000g 00000000 00000000\n", wantErr: "insert_failed"},
		{name: "too big", data: "entries insert_failed drop early_drop\n00000001 100000000 00000000 00000000\n", wantErr: "insert_failed"},
	}
	for _, tt := range tests {
		got, err := conntrack.ParseStat([]byte(tt.data))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestAssess(t *testing.T) {
	cpus := func(c ...conntrack.CPUStats) []conntrack.CPUStats { return c }
	tests := []struct {
		name         string
		prev         *conntrack.Sample
		cur          conntrack.Sample
		wantLevel    conntrack.Level
		wantFill     float64
		wantIF       uint64
		wantDrop     uint64
		wantEarly    uint64
		wantReasons  int
		reasonSubstr string
	}{
		{name: "empty table", cur: conntrack.Sample{Count: 0, Max: 1000, CPUs: cpus(conntrack.CPUStats{})}, wantLevel: conntrack.LevelOK},
		{name: "69.9% ok", cur: conntrack.Sample{Count: 699, Max: 1000}, wantLevel: conntrack.LevelOK, wantFill: 0.699},
		{name: "70% warning", cur: conntrack.Sample{Count: 700, Max: 1000}, wantLevel: conntrack.LevelWarning, wantFill: 0.7, wantReasons: 1, reasonSubstr: "70.0% full"},
		{name: "89.9% warning", cur: conntrack.Sample{Count: 899, Max: 1000}, wantLevel: conntrack.LevelWarning, wantFill: 0.899, wantReasons: 1},
		{name: "90% critical", cur: conntrack.Sample{Count: 900, Max: 1000}, wantLevel: conntrack.LevelCritical, wantFill: 0.9, wantReasons: 1, reasonSubstr: "90.0% full (900 of 1000"},
		{name: "no limit", cur: conntrack.Sample{Count: 5000, Max: 0}, wantLevel: conntrack.LevelOK},
		{
			name:      "first reading: counters are not growth",
			cur:       conntrack.Sample{Count: 1, Max: 1000, CPUs: cpus(conntrack.CPUStats{InsertFailed: 100, Drop: 5, EarlyDrop: 7})},
			wantLevel: conntrack.LevelOK, wantFill: 0.001,
		},
		{
			name:      "insert_failed growth is critical even when nearly empty",
			prev:      &conntrack.Sample{Count: 1, Max: 1000, CPUs: cpus(conntrack.CPUStats{InsertFailed: 100}, conntrack.CPUStats{InsertFailed: 4})},
			cur:       conntrack.Sample{Count: 2, Max: 1000, CPUs: cpus(conntrack.CPUStats{InsertFailed: 101}, conntrack.CPUStats{InsertFailed: 6})},
			wantLevel: conntrack.LevelCritical, wantFill: 0.002, wantIF: 3, wantReasons: 1, reasonSubstr: "DNS takes 5 seconds",
		},
		{
			name:      "drop growth is critical",
			prev:      &conntrack.Sample{Max: 1000, CPUs: cpus(conntrack.CPUStats{})},
			cur:       conntrack.Sample{Max: 1000, CPUs: cpus(conntrack.CPUStats{Drop: 2})},
			wantLevel: conntrack.LevelCritical, wantDrop: 2, wantReasons: 1, reasonSubstr: "drop grew by 2",
		},
		{
			name:      "early_drop growth is a warning",
			prev:      &conntrack.Sample{Max: 1000, CPUs: cpus(conntrack.CPUStats{EarlyDrop: 1})},
			cur:       conntrack.Sample{Max: 1000, CPUs: cpus(conntrack.CPUStats{EarlyDrop: 9})},
			wantLevel: conntrack.LevelWarning, wantEarly: 8, wantReasons: 1, reasonSubstr: "early_drop grew by 8",
		},
		{
			name:      "a 32-bit counter that wrapped",
			prev:      &conntrack.Sample{Max: 1000, CPUs: cpus(conntrack.CPUStats{InsertFailed: 0xfffffffe})},
			cur:       conntrack.Sample{Max: 1000, CPUs: cpus(conntrack.CPUStats{InsertFailed: 1})},
			wantLevel: conntrack.LevelCritical, wantIF: 3, wantReasons: 1,
		},
		{
			name:      "everything at once, critical first",
			prev:      &conntrack.Sample{Max: 1000, CPUs: cpus(conntrack.CPUStats{})},
			cur:       conntrack.Sample{Count: 950, Max: 1000, CPUs: cpus(conntrack.CPUStats{InsertFailed: 1, Drop: 1, EarlyDrop: 1})},
			wantLevel: conntrack.LevelCritical, wantFill: 0.95, wantIF: 1, wantDrop: 1, wantEarly: 1, wantReasons: 4, reasonSubstr: "95.0% full",
		},
	}
	for _, tt := range tests {
		h := conntrack.Assess(tt.prev, tt.cur)
		if h.Level != tt.wantLevel || h.Fill != tt.wantFill || h.InsertFailed != tt.wantIF || h.Drop != tt.wantDrop || h.EarlyDrop != tt.wantEarly || len(h.Reasons) != tt.wantReasons {
			t.Errorf("%s: Assess = %+v; want level %v fill %v insert_failed %d drop %d early_drop %d, %d reasons",
				tt.name, h, tt.wantLevel, tt.wantFill, tt.wantIF, tt.wantDrop, tt.wantEarly, tt.wantReasons)
		}
		if tt.reasonSubstr != "" && (len(h.Reasons) == 0 || !strings.Contains(h.Reasons[0], tt.reasonSubstr)) {
			t.Errorf("%s: first reason of %q does not contain %q", tt.name, h.Reasons, tt.reasonSubstr)
		}
	}
}

func TestReadSampleFakeProc(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"sys/" + conntrack.SysctlCount: "1234\n",
		"sys/" + conntrack.SysctlMax:   "262144\n",
		"net/stat/nf_conntrack": statHeader +
			"000004d2  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000000 00000000 00000000  00000000 00000000 00000000 00000000\n",
	}
	for name, v := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := conntrack.ReadSample(root)
	if err != nil {
		t.Fatal(err)
	}
	want := conntrack.Sample{Count: 1234, Max: 262144, CPUs: []conntrack.CPUStats{{InsertFailed: 1}}}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("ReadSample (-want +got):\n%s", diff)
	}
	if _, err := conntrack.ReadSample(t.TempDir()); err == nil {
		t.Error("ReadSample of an empty directory gave no error")
	}
}
