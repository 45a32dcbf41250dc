//! Compiles the one C++ helper of the bindings (`cxx/view_dims.cpp`: delete[] for the arrays
//! nnopbase returns).

fn main() {
    println!("cargo:rerun-if-changed=cxx");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .warnings(true)
        .extra_warnings(true)
        .file("cxx/view_dims.cpp")
        .compile("ascend_acl_cxx");
}
