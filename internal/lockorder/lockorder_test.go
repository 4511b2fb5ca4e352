package lockorder

import (
	"bufio"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// raceEnabled is whether this test binary was built with -race
// (race_test.go).
var raceEnabled bool

// checked are the packages whose locks docs/locks.md orders.
var checked = []string{
	"connector/relay",
	"connector/relay/ledger",
	"connector/internal/wsconn",
	"connector/internal/cluster",
	"connector/platform/nexscope",
	"connector/registry",
	"connector/platform/slack",
}

// TestLockOrder: every place the checked packages take a lock while
// holding another follows an order docs/locks.md gives, and every lock the
// document names exists.
func TestLockOrder(t *testing.T) {
	order, err := readOrder("../../docs/locks.md")
	if err != nil {
		t.Fatal(err)
	}
	a := analyze(t, checked...)
	if len(a.edges) < 5 {
		t.Fatalf("found %d nested acquisitions in %v; the analysis is broken", len(a.edges), checked)
	}
	for _, p := range order.problems(a) {
		t.Error(p)
	}
}

// TestLockOrderCatchesAnInversion: a package that takes two locks in both
// orders, one of them through a call, is reported.
func TestLockOrderCatchesAnInversion(t *testing.T) {
	order := parseOrder([]string{"inverted.a.mu -> inverted.b.mu"})
	a := analyze(t, "connector/internal/lockorder/testdata/inverted")
	problems := order.problems(a)
	if len(problems) != 1 || !strings.Contains(problems[0], "inverted.b.mu is held while inverted.a.mu is taken") {
		t.Fatalf("problems %q, want the inversion in ba", problems)
	}
	if got := fmt.Sprint(a.edges[[2]string{"inverted.a.mu", "inverted.b.mu"}]); !strings.Contains(got, "inverted.go:18") {
		t.Fatalf("a.mu -> b.mu found at %s, want the call in ab (inverted.go:18)", got)
	}
}

// order is the document's lock order: before[a][b] when a comes before b.
type order struct {
	before map[string]map[string]bool
	named  []string
}

// readOrder reads the chains ("a -> b -> c") of the document's first code
// block.
func readOrder(path string) (*order, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "```") {
			if in {
				break
			}
			in = true
			continue
		}
		if in && line != "" && !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("%s: no lock order (a code block of \"a -> b\" chains)", path)
	}
	return parseOrder(lines), sc.Err()
}

// parseOrder makes chains into an order, transitively.
func parseOrder(chains []string) *order {
	o := &order{before: map[string]map[string]bool{}}
	for _, c := range chains {
		locks := strings.Split(c, "->")
		for i := range locks {
			locks[i] = strings.TrimSpace(locks[i])
			if !slices.Contains(o.named, locks[i]) {
				o.named = append(o.named, locks[i])
			}
			for _, earlier := range locks[:i] {
				o.add(earlier, locks[i])
			}
		}
	}
	for changed := true; changed; { // transitive closure
		changed = false
		for a, bs := range o.before {
			for b := range bs {
				for c := range o.before[b] {
					if !o.before[a][c] {
						o.add(a, c)
						changed = true
					}
				}
			}
		}
	}
	return o
}

func (o *order) add(a, b string) {
	if o.before[a] == nil {
		o.before[a] = map[string]bool{}
	}
	o.before[a][b] = true
}

// problems lists each nesting the order does not allow and each lock the
// order names that the code does not have.
func (o *order) problems(a *analysis) []string {
	var out []string
	for _, e := range slices.SortedFunc(mapsKeys(a.edges), func(x, y [2]string) int { return strings.Compare(x[0]+x[1], y[0]+y[1]) }) {
		held, taken, where := e[0], e[1], a.edges[e]
		switch {
		case o.before[held][taken]:
		case held == taken:
			out = append(out, fmt.Sprintf("two %s held at once (%s)", held, where))
		case o.before[taken][held]:
			out = append(out, fmt.Sprintf("inversion: %s is held while %s is taken (%s); docs/locks.md orders %s first", held, taken, where, taken))
		default:
			out = append(out, fmt.Sprintf("%s is held while %s is taken (%s): an order docs/locks.md does not give", held, taken, where))
		}
	}
	for _, l := range o.named {
		if !a.locks[l] {
			out = append(out, fmt.Sprintf("docs/locks.md names %s, which no checked package locks", l))
		}
	}
	return out
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// analysis is what the packages do with their locks.
type analysis struct {
	fset  *token.FileSet
	funcs map[string]*function // by types.Func.FullName
	// methods are the functions with a receiver, by method name, with the
	// names of their receiver type's methods: the candidates of a call
	// through an interface.
	methods map[string][]*function
	acq     map[string]map[string]bool // locks a function takes, its callees' included
	locks   map[string]bool            // every lock taken
	edges   map[[2]string]string       // held, taken -> where first
}

type function struct {
	name    string
	body    *ast.BlockStmt
	info    *types.Info
	recvSet map[string]bool // method names of the receiver's type (methods only)
}

// analyze type-checks the packages and finds, in every function, the locks
// taken while others are held.
func analyze(t *testing.T, pkgs ...string) *analysis {
	t.Helper()
	a := &analysis{fset: token.NewFileSet(), funcs: map[string]*function{}, methods: map[string][]*function{},
		locks: map[string]bool{}, edges: map[[2]string]string{}}
	// The imports come from the compiler's export data, which go list
	// -export builds (with -race when this test binary has it, so from the
	// build cache go test -race just filled): type-checking every
	// dependency from source, under -race, took minutes on a loaded
	// machine.
	args := []string{"list", "-deps", "-export", "-json=ImportPath,Dir,GoFiles,Export"}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", pkgs, err)
	}
	type listed struct {
		ImportPath, Dir, Export string
		GoFiles                 []string
	}
	var listing []listed
	exports := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		listing = append(listing, p)
	}
	imp := importer.ForCompiler(a.fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	for _, p := range listing {
		if !slices.Contains(pkgs, p.ImportPath) {
			continue // a dependency: imported from its export data
		}
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(a.fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{},
			Selections: map[*ast.SelectorExpr]*types.Selection{}, Types: map[ast.Expr]types.TypeAndValue{}}
		conf := types.Config{Importer: imp}
		if _, err := conf.Check(p.ImportPath, a.fset, files, info); err != nil {
			t.Fatalf("type-checking %s: %v", p.ImportPath, err)
		}
		a.collect(files, info)
	}
	for _, f := range a.funcs {
		a.walk(f, f.body.List, nil)
	}
	return a
}

// collect records the functions of one package.
func (a *analysis) collect(files []*ast.File, info *types.Info) {
	for _, file := range files {
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			obj := info.Defs[fd.Name].(*types.Func)
			f := &function{name: obj.FullName(), body: fd.Body, info: info}
			if recv := obj.Type().(*types.Signature).Recv(); recv != nil {
				f.recvSet = map[string]bool{}
				ms := types.NewMethodSet(types.NewPointer(deref(recv.Type())))
				for i := range ms.Len() {
					f.recvSet[ms.At(i).Obj().Name()] = true
				}
				a.methods[obj.Name()] = append(a.methods[obj.Name()], f)
			}
			a.funcs[f.name] = f
		}
	}
	// Function literals are walked on their own (they may run on another
	// goroutine), starting with no lock held.
	for _, file := range files {
		ast.Inspect(file, func(n ast.Node) bool {
			if fl, ok := n.(*ast.FuncLit); ok {
				pos := a.fset.Position(fl.Pos())
				name := fmt.Sprintf("func literal at %s:%d", filepath.Base(pos.Filename), pos.Line)
				a.funcs[name] = &function{name: name, body: fl.Body, info: info}
			}
			return true
		})
	}
}

func deref(t types.Type) types.Type {
	if p, ok := t.(*types.Pointer); ok {
		return p.Elem()
	}
	return t
}

// walk follows stmts in order with held locks: a nested block starts with
// a copy, so a lock released on a path that returns stays held after it.
func (a *analysis) walk(f *function, stmts []ast.Stmt, held []string) []string {
	for _, s := range stmts {
		switch s := s.(type) {
		case *ast.BlockStmt:
			a.walk(f, s.List, slices.Clone(held))
		case *ast.IfStmt:
			held = a.walk(f, []ast.Stmt{s.Init}, held)
			held = a.calls(f, s.Cond, held)
			a.walk(f, s.Body.List, slices.Clone(held))
			if s.Else != nil {
				a.walk(f, []ast.Stmt{s.Else}, slices.Clone(held))
			}
		case *ast.ForStmt:
			held = a.walk(f, []ast.Stmt{s.Init}, held)
			held = a.calls(f, s.Cond, held)
			a.walk(f, append(slices.Clone(s.Body.List), s.Post), slices.Clone(held))
		case *ast.RangeStmt:
			held = a.calls(f, s.X, held)
			a.walk(f, s.Body.List, slices.Clone(held))
		case *ast.SwitchStmt:
			held = a.walk(f, []ast.Stmt{s.Init}, held)
			held = a.calls(f, s.Tag, held)
			a.walk(f, s.Body.List, slices.Clone(held))
		case *ast.TypeSwitchStmt:
			held = a.walk(f, []ast.Stmt{s.Init, s.Assign}, held)
			a.walk(f, s.Body.List, slices.Clone(held))
		case *ast.SelectStmt:
			a.walk(f, s.Body.List, slices.Clone(held))
		case *ast.CaseClause:
			for _, e := range s.List {
				held = a.calls(f, e, held)
			}
			a.walk(f, s.Body, slices.Clone(held))
		case *ast.CommClause:
			held = a.walk(f, []ast.Stmt{s.Comm}, held)
			a.walk(f, s.Body, slices.Clone(held))
		case *ast.LabeledStmt:
			held = a.walk(f, []ast.Stmt{s.Stmt}, held)
		case *ast.GoStmt:
			// Runs on another goroutine: nothing held here is held there.
		case *ast.DeferStmt:
			// Runs at return: an Unlock keeps the lock held until then.
			if name, _ := lockCall(f.info, s.Call); name == "" {
				held = a.calls(f, s.Call, held)
			}
		default:
			if s != nil {
				held = a.callsIn(f, s, held)
			}
		}
	}
	return held
}

// calls takes, in order, the calls in n (not inside function literals).
func (a *analysis) calls(f *function, n ast.Expr, held []string) []string {
	if n == nil {
		return held
	}
	return a.callsIn(f, n, held)
}

// callsIn is calls for any node.
func (a *analysis) callsIn(f *function, n ast.Node, held []string) []string {
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.CallExpr:
			held = a.call(f, n, held)
		}
		return true
	})
	return held
}

// call takes one call: a lock, an unlock, or a call of a function whose
// locks are then taken under held.
func (a *analysis) call(f *function, c *ast.CallExpr, held []string) []string {
	where := a.fset.Position(c.Pos())
	at := fmt.Sprintf("%s:%d", filepath.Base(where.Filename), where.Line)
	switch name, op := lockCall(f.info, c); {
	case name == "":
	case op == "Lock" || op == "RLock":
		for _, h := range held {
			a.edge(h, name, at)
		}
		a.locks[name] = true
		return append(held, name)
	default:
		if i := slices.Index(held, name); i >= 0 {
			return slices.Delete(held, i, i+1)
		}
		return held
	}
	for _, callee := range a.callees(f.info, c) {
		// A callee that releases a lock held here (room.unlock) releases
		// it before it takes others.
		for l := range a.releases(callee) {
			if i := slices.Index(held, l); i >= 0 {
				held = slices.Delete(held, i, i+1)
			}
		}
		for l := range a.acquires(callee) {
			for _, h := range held {
				a.edge(h, l, at)
			}
		}
	}
	return held
}

func (a *analysis) edge(held, taken, at string) {
	if _, seen := a.edges[[2]string{held, taken}]; !seen {
		a.edges[[2]string{held, taken}] = at
	}
}

// releases returns the locks function name unlocks without having locked
// them: a helper that ends its caller's critical section.
func (a *analysis) releases(name string) map[string]bool {
	f := a.funcs[name]
	if f == nil {
		return nil
	}
	out := map[string]bool{}
	locked := map[string]bool{}
	ast.Inspect(f.body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit, *ast.DeferStmt:
			return false
		case *ast.CallExpr:
			switch l, op := lockCall(f.info, n); op {
			case "Lock", "RLock":
				locked[l] = true
			case "Unlock", "RUnlock":
				if !locked[l] {
					out[l] = true
				}
			}
		}
		return true
	})
	return out
}

// acquires returns the locks function name takes, its callees' included.
// It is the least fixed point over the whole call graph (computed once,
// by closure), so a cycle of calls never leaves a function with the part
// of its locks that the walk happened to reach first.
func (a *analysis) acquires(name string) map[string]bool {
	if a.acq == nil {
		a.closeAcquires()
	}
	return a.acq[name]
}

// closeAcquires fills acq: each function's own locks, then its callees'
// until nothing changes.
func (a *analysis) closeAcquires() {
	a.acq = map[string]map[string]bool{}
	callees := map[string][]string{}
	for name, f := range a.funcs {
		own := map[string]bool{}
		ast.Inspect(f.body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit, *ast.GoStmt:
				return false
			case *ast.CallExpr:
				if l, op := lockCall(f.info, n); op == "Lock" || op == "RLock" {
					own[l] = true
					return true
				}
				callees[name] = append(callees[name], a.callees(f.info, n)...)
			}
			return true
		})
		a.acq[name] = own
	}
	for changed := true; changed; {
		changed = false
		for name, cs := range callees {
			for _, c := range cs {
				for l := range a.acq[c] {
					if !a.acq[name][l] {
						a.acq[name][l] = true
						changed = true
					}
				}
			}
		}
	}
}

// callees returns the functions a call may run: the one it names, or,
// through an interface, every checked method of that name whose type has
// all of the interface's methods.
func (a *analysis) callees(info *types.Info, c *ast.CallExpr) []string {
	var obj types.Object
	switch fn := ast.Unparen(c.Fun).(type) {
	case *ast.Ident:
		obj = info.Uses[fn]
	case *ast.SelectorExpr:
		if sel := info.Selections[fn]; sel != nil {
			obj = sel.Obj()
		} else {
			obj = info.Uses[fn.Sel]
		}
	}
	fn, ok := obj.(*types.Func)
	if !ok {
		return nil
	}
	fn = fn.Origin()
	recv := fn.Type().(*types.Signature).Recv()
	if recv == nil {
		return []string{fn.FullName()}
	}
	iface, ok := recv.Type().Underlying().(*types.Interface)
	if !ok {
		return []string{fn.FullName()}
	}
	var out []string
	for _, m := range a.methods[fn.Name()] {
		all := true
		for i := range iface.NumMethods() {
			all = all && m.recvSet[iface.Method(i).Name()]
		}
		if all {
			out = append(out, m.name)
		}
	}
	return out
}

// lockCall reports the lock c locks or unlocks (a sync.Mutex or RWMutex,
// named by the type holding it and its field, or by its package and
// variable) and the method; "" for any other call.
func lockCall(info *types.Info, c *ast.CallExpr) (name, op string) {
	sel, ok := ast.Unparen(c.Fun).(*ast.SelectorExpr)
	if !ok {
		return "", ""
	}
	s := info.Selections[sel]
	if s == nil || s.Kind() != types.MethodVal {
		return "", ""
	}
	m := s.Obj().(*types.Func)
	op = m.Name()
	if m.Pkg() == nil || m.Pkg().Path() != "sync" || (op != "Lock" && op != "Unlock" && op != "RLock" && op != "RUnlock") {
		return "", ""
	}
	if len(s.Index()) > 1 { // a mutex embedded in the receiver's type
		st, ok := deref(s.Recv()).Underlying().(*types.Struct)
		if !ok {
			return "", ""
		}
		return typeName(deref(s.Recv())) + "." + st.Field(s.Index()[0]).Name(), op
	}
	switch x := ast.Unparen(sel.X).(type) {
	case *ast.SelectorExpr:
		if fs := info.Selections[x]; fs != nil && fs.Kind() == types.FieldVal {
			return typeName(deref(fs.Recv())) + "." + x.Sel.Name, op
		}
		if v, ok := info.Uses[x.Sel].(*types.Var); ok && v.Parent() == v.Pkg().Scope() {
			return v.Pkg().Name() + "." + v.Name(), op
		}
	case *ast.Ident:
		if v, ok := info.Uses[x].(*types.Var); ok && v.Pkg() != nil && v.Parent() == v.Pkg().Scope() {
			return v.Pkg().Name() + "." + v.Name(), op
		}
	}
	return "", ""
}

func typeName(t types.Type) string {
	if n, ok := t.(*types.Named); ok {
		return n.Obj().Pkg().Name() + "." + n.Obj().Name()
	}
	return t.String()
}
