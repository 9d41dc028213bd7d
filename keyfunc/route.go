package keyfunc

import "fmt"

// Route keys a request by its method and route pattern, such as
// "GET /items/{id}": every request to one endpoint shares a key, whatever
// the IDs in its path. It never uses the raw path, whose IDs would make a
// new key for every item and let a client escape its limit. Combine it with
// a caller key using [Join] for a per-caller, per-endpoint limit.
//
// A request whose route is unknown ([Request.Route] returns "", as for a
// request no route matched) is an error wrapping [ErrNoKey].
func Route(r Request) (string, error) {
	route := r.Route()
	if route == "" {
		return "", fmt.Errorf("%w: route pattern unknown", ErrNoKey)
	}
	return r.Method() + " " + route, nil
}
