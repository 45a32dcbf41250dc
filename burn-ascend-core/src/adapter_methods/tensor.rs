//! The shared part of the adapters' tensor primitive.

/// The tensor primitive both adapters define (`AscendTensor`, the core's
/// [`crate::AscendTensor`] under a local type because of the orphan rule), its conversions and
/// the `Lift` trait that turns core results into adapter values, for each adapter's `tensor`
/// module; Burn's `TensorMetadata` impl and the list of values `Lift` passes unchanged stay in
/// the adapter (they differ between Burn 0.21 and 0.22).
#[macro_export]
macro_rules! adapter_tensor {
    () => {
        /// A tensor on an Ascend device (float, int and bool tensors alike): the core's
        /// [`ops::AscendTensor`] as Burn's primitive. Burn's traits cannot be implemented on the core's
        /// type in this crate (the orphan rule), hence the wrapper; it dereferences to the core tensor,
        /// so `&t` passes where the core takes `&AscendTensor`.
        #[derive(Clone, Debug, TransparentWrapper)]
        #[repr(transparent)]
        pub struct AscendTensor(ops::AscendTensor);

        impl AscendTensor {
            /// The core tensor.
            pub fn into_inner(self) -> ops::AscendTensor {
                self.0
            }

            /// The element type. (Inherent, so that it is the device type and not Burn's
            /// [`TensorMetadata::dtype`], as on the core tensor.)
            pub fn dtype(&self) -> DataType {
                self.0.dtype()
            }

            /// The shape, as on the core tensor (Burn's is [`TensorMetadata::shape`]).
            pub fn shape(&self) -> &[usize] {
                self.0.shape()
            }
        }

        /// Tensors as the core's, for the core's ops on several tensors.
        pub(crate) fn cores(tensors: &[AscendTensor]) -> &[ops::AscendTensor] {
            AscendTensor::peel_slice(tensors)
        }

        impl Deref for AscendTensor {
            type Target = ops::AscendTensor;

            fn deref(&self) -> &ops::AscendTensor {
                &self.0
            }
        }

        impl From<ops::AscendTensor> for AscendTensor {
            fn from(t: ops::AscendTensor) -> Self {
                Self(t)
            }
        }

        impl From<AscendTensor> for ops::AscendTensor {
            fn from(t: AscendTensor) -> Self {
                t.0
            }
        }

        /// A core result as the adapter's value: core tensors become [`AscendTensor`]s (also inside
        /// tuples, vectors and options), everything else passes unchanged.
        pub(crate) trait Lift {
            /// The adapter's type.
            type Out;
            /// Converts.
            fn lift(self) -> Self::Out;
        }

        impl Lift for ops::AscendTensor {
            type Out = AscendTensor;
            fn lift(self) -> AscendTensor {
                AscendTensor(self)
            }
        }

        impl<A: Lift, B: Lift> Lift for (A, B) {
            type Out = (A::Out, B::Out);
            fn lift(self) -> Self::Out {
                (self.0.lift(), self.1.lift())
            }
        }

        impl<A: Lift, B: Lift, C: Lift> Lift for (A, B, C) {
            type Out = (A::Out, B::Out, C::Out);
            fn lift(self) -> Self::Out {
                (self.0.lift(), self.1.lift(), self.2.lift())
            }
        }

        impl<T: Lift> Lift for Vec<T> {
            type Out = Vec<T::Out>;
            fn lift(self) -> Self::Out {
                self.into_iter().map(Lift::lift).collect()
            }
        }

        impl<T: Lift> Lift for Option<T> {
            type Out = Option<T::Out>;
            fn lift(self) -> Self::Out {
                self.map(Lift::lift)
            }
        }

        impl<T: Lift, const N: usize> Lift for [T; N] {
            type Out = [T::Out; N];
            fn lift(self) -> Self::Out {
                self.map(Lift::lift)
            }
        }
    };
}
