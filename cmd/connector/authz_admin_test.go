package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The authorization matrix's sweep of the admin listener: its routes take
// the admin token only, so every credential a tenant holds (and none) is
// refused 401 on each of them, aimed at the other tenant, whose registry
// entry stays as it was.

// mxAdminRoute is one route of the admin API: its ServeMux pattern as
// admin.New registers it, and a body that would change the victim's entry
// were the request let through.
type mxAdminRoute struct {
	pattern string
	body    func(y *mxTenant) any
}

// mxAdminRoutes are every route of the admin API.
func mxAdminRoutes() []mxAdminRoute {
	none := func(*mxTenant) any { return nil }
	return []mxAdminRoute{
		{"GET /admin/v1/tenants", none},
		{"POST /admin/v1/tenants", func(*mxTenant) any { return map[string]string{"id": "xt-made"} }},
		{"DELETE /admin/v1/tenants/{tenant}", none},
		{"PUT /admin/v1/tenants/{tenant}/session", func(*mxTenant) any { return map[string]string{"profile": "xt"} }},
		{"PUT /admin/v1/tenants/{tenant}/max-gateways", func(*mxTenant) any { return map[string]int{"max_gateways": 1} }},
		{"POST /admin/v1/tenants/{tenant}/gateways", func(*mxTenant) any { return map[string]string{"id": "xt-gw"} }},
		{"POST /admin/v1/tenants/{tenant}/gateways/{gateway}/rotate", func(*mxTenant) any { return map[string]string{"grace": "0s"} }},
		{"DELETE /admin/v1/tenants/{tenant}/gateways/{gateway}", none},
		{"PUT /admin/v1/tenants/{tenant}/bindings", func(*mxTenant) any {
			return map[string]string{"platform": "telegram", "kind": "chat", "id": "-1999"}
		}},
		{"DELETE /admin/v1/tenants/{tenant}/bindings", func(y *mxTenant) any {
			return map[string]string{"platform": "telegram", "kind": "chat", "id": y.tgBound.chat}
		}},
		{"PUT /admin/v1/tenants/{tenant}/gateways/{gateway}/wake", func(*mxTenant) any {
			return map[string]string{"url": "http://127.0.0.1:1/xt-attack"}
		}},
		{"POST /admin/v1/tenants/{tenant}/enroll-tokens", func(*mxTenant) any { return map[string]string{"ttl": "1h"} }},
		{"GET /admin/v1/backup", none},
	}
}

// adminPattern is a route admin.New registers.
var adminPattern = regexp.MustCompile(`h\.(?:change|mux\.HandleFunc)\("([A-Z]+ /admin/[^"]+)"`)

// attackAdminListener sends every admin route, aimed at y, with each
// bearer of each of x's credential kinds: each is 401, carries none of
// y's ids, and y's registry entry does not move. It first checks that
// mxAdminRoutes lists exactly the routes admin.New registers.
func (m *matrix) attackAdminListener(t *testing.T) {
	src, err := os.ReadFile("../../admin/admin.go")
	if err != nil {
		t.Fatal(err)
	}
	var registered, listed []string
	for _, s := range adminPattern.FindAllStringSubmatch(string(src), -1) {
		registered = append(registered, s[1])
	}
	routes := mxAdminRoutes()
	for _, r := range routes {
		listed = append(listed, r.pattern)
	}
	slices.Sort(registered)
	slices.Sort(listed)
	if len(registered) == 0 || !slices.Equal(registered, listed) {
		t.Fatalf("the admin API registers %q; mxAdminRoutes lists %q: give every route a row", registered, listed)
	}
	for _, d := range [][2]*mxTenant{{m.ta, m.tb}, {m.tb, m.ta}} {
		x, y := d[0], d[1]
		for _, c := range mxCreds {
			m.unchanged(t, x, y, func() {
				for _, r := range routes {
					method, path, _ := strings.Cut(r.pattern, " ")
					path = strings.NewReplacer("{tenant}", y.id, "{gateway}", y.gws[mxAdminGW].id).Replace(path)
					for _, b := range m.bearers(t, x, c) {
						status, body := m.adminListener(t, method, path, b, r.body(y))
						if status != http.StatusUnauthorized || slices.ContainsFunc(y.ids(), func(id string) bool { return id != "" && strings.Contains(body, id) }) {
							t.Errorf("%s %s on the admin listener with %s's %s: %d %s, want 401 naming nothing of %s", method, path, x.id, c, status, body, y.id)
						}
					}
				}
			})
		}
	}
}

// adminListener sends one request to the admin listener with bearer (""
// sends no Authorization) and returns the answer's status and body.
func (m *matrix) adminListener(t *testing.T, method, path, bearer string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, "http://"+m.r.child.admin+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s on the admin listener: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(data)
}
