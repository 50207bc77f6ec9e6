package manager

// NewInformerFactories exposes the controllers' informer factories to the
// tests of package manager_test, which start a real API server (and so may
// import what imports this package).
var NewInformerFactories = newInformerFactories
